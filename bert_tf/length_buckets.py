"""Length buckets: the few sequence lengths a batch is cut to (`--length_buckets`).

A batch of records padded to max_seq_length is cut to its longest real row rounded up to the
next bucket boundary, so the model computes about as many positions as the text has while the
number of distinct shapes stays small: XLA (and any compiled program) builds one program per
boundary. Records on disk keep their fixed length; only the batches in memory are cut.

Pure Python (no TensorFlow), shared by the commands' flags, the tf.data pipelines and the
exports.

  auto   for batches of a record file drawn at random (fine-tuning's training batches in the
         original's order, its eval and predict batches): at most FIT_BOUNDARIES boundaries
         fitted to the file's real lengths (fit_buckets): placed where the longest row of a
         batch falls, so a batch computes about as many positions as its longest row has
         (tagging sentences of CoNLL length: 36.8 positions on average, against 39.8 with the
         ladder below and 36.8 for exact padding). Elsewhere (exports, extract_features, length-
         grouped training, whose batches are sorted) the ladder: multiples of 8 up to 64, of 16
         up to 128, of 32 up to 256, then of 64, each at most max_seq_length, and
         max_seq_length itself (128 -> 12 boundaries, 384 -> 18, 512 -> 20); finer steps where
         text is short, where most fine-tuning text is. Without XLA the train step is traced
         once whatever the bucket; with --jit_compile XLA compiles one program per bucket met,
         at most the number of boundaries.
  none   every batch keeps max_seq_length (the original's shapes)
  LIST   comma-separated boundaries, e.g. 32,64,128 (max_seq_length is added if missing)
"""

from typing import Dict, List, Optional, Sequence, Tuple

AUTO = "auto"
NONE = "none"
FLAG_HELP = ("Cut each batch to its longest real row rounded up to one of these lengths: "
             "'auto' (for a record file's batches, at most 8 lengths fitted to where the file's "
             "batches end; otherwise multiples of 8 up to 64, of 16 up to 128, of 32 up to 256, "
             "then of 64; at most max_seq_length), 'none' (always max_seq_length, the original's "
             "shapes), or a "
             "comma-separated list. The outputs are the same; only the padding computed goes. "
             "With --use_tpu, 'auto' means none (TPUs want one static shape).")

# (up to this length, step) pairs of the auto ladder.
_AUTO_LADDER = ((64, 8), (128, 16), (256, 32), (1 << 30, 64))
# The most boundaries 'auto' fits to a record file (max_seq_length included): the programs a
# step function compiles under XLA. Eight place the boundaries within about 1% of exact padding
# on the benchmarks' tasks (benchmarks/README.md).
FIT_BOUNDARIES = 8
# Of the fits with 1..FIT_BOUNDARIES boundaries, the one with the fewest boundaries whose
# expected width is within this fraction of the best: fewer programs for no measurable work.
FIT_TOLERANCE = 0.005
# Lengths whose chance of being a batch's longest row is below this are not boundaries (they
# still count, in the boundary above them).
_FIT_NEGLIGIBLE = 1e-9


class LengthBucketsError(ValueError):
  """A --length_buckets value that cannot be used; the message names the flag."""


def auto_buckets(max_seq_length: int) -> Tuple[int, ...]:
  """The 'auto' boundaries for max_seq_length (always ending with max_seq_length)."""
  boundaries = []
  length, previous_limit = 0, 0
  for limit, step in _AUTO_LADDER:
    length = max(length, previous_limit)
    while length + step <= min(limit, max_seq_length):
      length += step
      boundaries.append(length)
    previous_limit = limit
    if length >= max_seq_length:
      break
  if not boundaries or boundaries[-1] != max_seq_length:
    boundaries.append(max_seq_length)
  return tuple(boundaries)


def batch_longest_distribution(length_counts: Sequence[int], rows: int) -> List[float]:
  """P(the longest of `rows` rows drawn at random is L), for L = 0..len(length_counts) - 1,
  from the counts of rows of each real length (index = length).

  Rows are drawn with replacement: P(longest <= L) = F(L) ** rows, F the lengths' cumulative
  share; exact for a shuffled file, an approximation for batches read in file order.
  """
  total = sum(length_counts)
  if total <= 0:
    raise ValueError("length_counts holds no row")
  if rows < 1:
    raise ValueError(f"rows must be at least 1, got {rows}")
  distribution, cumulative, previous = [], 0, 0.0
  for count in length_counts:
    cumulative += count
    at_most = (cumulative / total) ** rows
    distribution.append(max(0.0, at_most - previous))
    previous = at_most
  return distribution


def expected_width(distribution: Sequence[float], boundaries: Sequence[int]) -> float:
  """The mean number of positions a batch computes: sum over L of P(L) * bucket_for(L)."""
  return sum(p * bucket_for(length, boundaries) for length, p in enumerate(distribution) if p)


def fit_buckets(length_counts: Sequence[int], rows: int, max_seq_length: int,
                max_boundaries: int = FIT_BOUNDARIES, multiple: int = 1) -> Tuple[int, ...]:
  """The boundaries (at most max_boundaries, the last max_seq_length) that minimise the
  expected width of a batch of `rows` rows drawn at random from records whose real lengths
  have these counts (length_counts[L] rows of length L, L = 0..max_seq_length).

  The cut of a batch is the smallest boundary at or above its longest row, so only the
  distribution of that longest row matters (batch_longest_distribution); the boundaries are
  found by dynamic programming over the lengths it can take (exact for that distribution).
  Of the optima with 1..max_boundaries boundaries the one with the fewest whose width is
  within FIT_TOLERANCE of the best is returned: fewer shapes, the same work. With multiple > 1
  every boundary but max_seq_length is a multiple of it (e.g. 8 for GPU tensor cores).
  Records with no row give auto_buckets(max_seq_length).
  """
  if len(length_counts) != max_seq_length + 1:
    raise ValueError(f"length_counts has {len(length_counts)} entries, expected "
                     f"max_seq_length + 1 = {max_seq_length + 1}")
  if max_boundaries < 1 or multiple < 1:
    raise ValueError("max_boundaries and multiple must be at least 1")
  if sum(length_counts) <= 0:
    return auto_buckets(max_seq_length)
  distribution = batch_longest_distribution(length_counts, rows)
  # Where a boundary may go: the lengths a batch's longest row takes (rounded up to the
  # multiple), and max_seq_length. mass[i]: the chance that candidates[i] is the smallest
  # candidate at or above the longest row.
  weights: Dict[int, float] = {}
  for length, p in enumerate(distribution):
    if p > 0.0:
      candidate = min(-(-max(length, 1) // multiple) * multiple, max_seq_length)
      weights[candidate] = weights.get(candidate, 0.0) + p
  candidates = sorted(c for c, p in weights.items() if p >= _FIT_NEGLIGIBLE)
  if not candidates or candidates[-1] != max_seq_length:
    candidates.append(max_seq_length)
  mass = [0.0] * len(candidates)
  for length, p in weights.items():  # negligible lengths go to the candidate above them
    mass[next(i for i, c in enumerate(candidates) if c >= length)] += p
  prefix = [0.0]
  for m in mass:
    prefix.append(prefix[-1] + m)
  # cost[k][j]: the least expected width of the batches whose longest row is at most
  # candidates[j], with k + 1 boundaries, the highest at candidates[j]; back[k][j]: the
  # boundary below it.
  n = len(candidates)
  cost = [[prefix[j + 1] * candidates[j] for j in range(n)]]
  back = [[-1] * n]
  for k in range(1, min(max_boundaries, n)):
    row, links = [float("inf")] * n, [-1] * n
    for j in range(k, n):
      for i in range(k - 1, j):
        value = cost[k - 1][i] + (prefix[j + 1] - prefix[i + 1]) * candidates[j]
        if value < row[j]:
          row[j], links[j] = value, i
    cost.append(row)
    back.append(links)
  best = min(level[n - 1] for level in cost)
  k = next(k for k, level in enumerate(cost) if level[n - 1] <= best * (1 + FIT_TOLERANCE))
  boundaries, j = [], n - 1
  while j >= 0 and k >= 0:
    boundaries.append(candidates[j])
    j, k = back[k][j], k - 1
  return tuple(sorted(boundaries))


def parse(value: Optional[str], max_seq_length: int, flag: str = "--length_buckets",
          use_tpu: bool = False) -> Optional[Tuple[int, ...]]:
  """The boundaries a flag value asks for, or None for fixed-length batches.

  Args:
    value: "auto", "none" (or "" / None), or comma-separated positive integers.
    max_seq_length: the records' length; boundaries above it are refused, and it is added as
      the last boundary.
    flag: the flag's name, for messages.
    use_tpu: TPUs compile one static shape: "auto" then means fixed length and a list is
      refused.

  Raises:
    LengthBucketsError: a value that is not one of the above.
  """
  text = (value or NONE).strip().lower()
  if text == NONE:
    return None
  if text == AUTO:
    return None if use_tpu else auto_buckets(max_seq_length)
  if use_tpu:
    raise LengthBucketsError(f"{flag}={value}: TPUs run one static shape; use auto or none "
                             "with --use_tpu")
  boundaries = []
  for part in text.split(","):
    part = part.strip()
    try:
      boundary = int(part)
    except ValueError:
      raise LengthBucketsError(f"{flag}={value}: {part!r} is not a length (expected auto, "
                               "none or comma-separated integers)") from None
    if not 1 <= boundary <= max_seq_length:
      raise LengthBucketsError(f"{flag}={value}: {boundary} is outside 1..{max_seq_length} "
                               "(--max_seq_length)")
    boundaries.append(boundary)
  return tuple(sorted(set(boundaries) | {max_seq_length}))


def bucket_for(length: int, boundaries: Sequence[int]) -> int:
  """The smallest boundary >= length (the last boundary for anything longer)."""
  for boundary in boundaries:
    if boundary >= length:
      return boundary
  return boundaries[-1]


def describe(boundaries: Optional[Sequence[int]], max_seq_length: int) -> str:
  """One line for the logs: which lengths batches can have, i.e. how many programs a step
  function compiles at most."""
  if boundaries is None:
    return f"fixed length {max_seq_length} (one shape)"
  return (f"cut to the longest row, rounded up to one of {','.join(map(str, boundaries))} "
          f"(at most {len(boundaries)} shapes per step function)")


def bucket_width_tensor(longest, boundaries: Sequence[int]):
  """In-graph bucket_for: int32 scalar tensor `longest` -> the smallest boundary >= it (the
  last boundary for anything longer). Imports TensorFlow when called."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  bounds = tf.constant(list(boundaries), tf.int32)
  index = tf.searchsorted(bounds, tf.reshape(tf.cast(longest, tf.int32), [1]), side="left")[0]
  return tf.gather(bounds, tf.minimum(index, len(boundaries) - 1))
