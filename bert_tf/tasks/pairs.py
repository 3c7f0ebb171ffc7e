"""The original's truncation of a text pair (run_classifier.py:_truncate_seq_pair), shared by
the tasks that put two texts in one sequence (classifier, features)."""

from typing import Tuple


def truncated_pair_lengths(len_a: int, len_b: int, max_length: int) -> Tuple[int, int]:
  """Lengths the original's `_truncate_seq_pair` leaves: pop from the longer, from B on a tie.

  Computed directly rather than one pop at a time: the longer list is cut to the shorter's
  length, and the remaining excess alternates B, A, B, ... (B takes the odd one).
  """
  if max_length < 0:
    raise ValueError(f"cannot truncate a pair to {max_length} tokens")
  excess = len_a + len_b - max_length
  if excess <= 0:
    return len_a, len_b
  if len_a > len_b:
    cut = min(excess, len_a - len_b)
    len_a -= cut
    excess -= cut
  elif len_b > len_a:
    cut = min(excess, len_b - len_a)
    len_b -= cut
    excess -= cut
  return len_a - excess // 2, len_b - (excess + 1) // 2


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_length: int) -> None:
  """Truncates two lists in place, from the end, to at most max_length items together."""
  len_a, len_b = truncated_pair_lengths(len(tokens_a), len(tokens_b), max_length)
  del tokens_a[len_a:]
  del tokens_b[len_b:]
