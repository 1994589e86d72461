#!/bin/bash
cd /work/main
exec .venv/bin/python -m agent_r1_async.cli launch --config configs/world.yaml \
  --set env.args.horizon=long --set env.max_turns=100 --set env.args.end_after_repeats=0 \
  --set model.max_model_len=6656 --set learner.micro_batch_tokens=6656 \
  --set engine.kv_cache_gb=2 --set algorithm.group_size=4 --set algorithm.batch_groups=1 \
  --set actors.groups_in_flight=2 --set learner.total_updates=3 --set eval.in_launch=false \
  --set model.init_from=/root/.cache/agent_r1_async/warm-start/432584cef2603981/checkpoints/step-8 \
  --set launch.warm_start=false --set launch.max_wall_time_s=3000 \
  --set launch.run_root=/work/launch-run/runs --set launch.name=world-100
