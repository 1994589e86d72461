"""Answer rewards: SQuAD-style normalization, exact match, token F1, answer-format reward.

Design choice: the same normalization as the SQuAD / HotpotQA evaluation scripts (lowercase,
strip punctuation, drop the articles a/an/the, collapse whitespace), so numbers reported here
are comparable with Agent-R1 and the multi-hop QA literature. With several gold answers the
best-matching one counts (max over golds). All functions are pure.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)
_TAG = re.compile(r"<[^<>]*>")
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def normalize_answer(text: str) -> str:
    """Lowercase, remove punctuation and articles, collapse whitespace (SQuAD order)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _golds(gold: str | Iterable[str]) -> list[str]:
    return [gold] if isinstance(gold, str) else list(gold)


def exact_match(prediction: str | None, gold: str | Iterable[str]) -> float:
    """1.0 if the normalized prediction equals any normalized gold answer, else 0.0."""
    if prediction is None:
        return 0.0
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _golds(gold)))


def answer_in_output(text: str | None, gold: str | Iterable[str]) -> float:
    """1.0 if any normalized gold answer occurs in the normalized `text` as whole words (a
    lenient score for output that does not follow the answer format), else 0.0. Markup tags
    (`<answer>`) separate words."""
    if not text:
        return 0.0
    padded = f" {normalize_answer(_TAG.sub(' ', text))} "
    return float(any(g and f" {g} " in padded for g in map(normalize_answer, _golds(gold))))


def _f1_one(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    # Token-level F1 over the bag of tokens (SQuAD): overlap counts repeated tokens once each.
    common = Counter(pred_tokens) & Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str | None, gold: str | Iterable[str]) -> float:
    """Max token-level F1 between the normalized prediction and any gold answer."""
    if prediction is None:
        return 0.0
    pred_tokens = normalize_answer(prediction).split()
    best = 0.0
    for g in _golds(gold):
        gold_tokens = normalize_answer(g).split()
        if not pred_tokens or not gold_tokens:
            # Both empty counts as a match (SQuAD convention); one empty is a miss.
            best = max(best, float(pred_tokens == gold_tokens))
        else:
            best = max(best, _f1_one(pred_tokens, gold_tokens))
    return best


def extract_answer(text: str) -> str | None:
    """The content of the first `<answer>...</answer>` in an action, stripped; None if absent."""
    m = _ANSWER.search(text)
    return m.group(1).strip() if m else None


def format_reward(text: str) -> float:
    """1.0 when the action holds exactly one non-empty `<answer>...</answer>` block, else 0.0."""
    matches = _ANSWER.findall(text)
    return float(len(matches) == 1 and matches[0].strip() != "")
