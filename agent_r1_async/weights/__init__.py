"""Weights from the learner to the engines: the seam (seam.py) and one module per backend
(zmq.py; the vLLM-native backends: native_sender.py, native_receiver.py, rendezvous.py,
gloo.py, nccl.py, vllm_plugin.py); backends.py builds the configured one."""
