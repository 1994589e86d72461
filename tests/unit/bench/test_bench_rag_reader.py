"""bench/bench_rag_reader.py: best k on dev and the table, from hand-made results."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench import bench_rag_reader as b


def _eval(em, f1=0.5, fmt=1.0, inside=0.0, k=2, seed=0):
    return {"em": em, "f1": f1, "format_ok": fmt, "answer_in_output": inside, "k": k,
            "seed": seed, "episodes": 10, "split": "x", "rows": "r"}


def test_best_k_is_the_highest_dev_em_ties_to_the_smaller_k(tmp_path, monkeypatch):
    done = {"dev s0 k2": _eval(0.2, k=2), "dev s0 k4": _eval(0.3, k=4),
            "dev s0 k8": _eval(0.3, k=8)}
    for s in (0, 1):
        done[f"reader s{s}"] = f"c{s}"
        done[f"test s{s}"] = _eval(0.1 + s / 10, k=4, seed=s)
    done["untrained naive_rag"] = _eval(0.0, fmt=0.2, inside=0.25, k=4)
    done["untrained base_tool_call"] = _eval(0.0, fmt=0.0, inside=0.125)
    b._save(tmp_path / "results.json", done)
    monkeypatch.setattr(b, "reader", lambda *a: (_ for _ in ()).throw(AssertionError("ran")))
    monkeypatch.setattr(b, "evaluate", lambda *a: (_ for _ in ()).throw(AssertionError("ran")))
    args = argparse.Namespace(out=tmp_path, ks=[2, 4, 8], seeds=[0, 1], demos=32, epochs=2,
                              train_k=8,
                              budget_from="x", config=Path("configs/multihop.yaml"),
                              overrides=[])
    res = b.run(args)
    assert res["best_k"] == 4  # 0.3 at k 4 and 8: the smaller
    text = b.table(res, [0, 1])
    assert "trained on top-8 prompts" in text
    # EM 0.1, 0.2: mean 0.15, sd = sqrt(((0.05)^2 * 2) / 1) = 0.0707
    assert "| Naive RAG, trained reader (EM per seed 0.100, 0.200) | 2 | 0.150 ± 0.071 | " \
           "0.500 ± 0.000 | 1.000 ± 0.000 | 0.000 ± 0.000 |" in text
    assert "| Naive RAG, untrained model, k = 4 | 1 | 0.000 | 0.500 | 0.200 | 0.250 |" in text
    assert "| Base Tool Call, untrained model | 1 | 0.000 | 0.500 | 0.000 | 0.125 |" in text
    assert text.index("| 2 | 0.200") < text.index("| 4 | 0.300") < text.index("| 8 | 0.300")
