"""Several examples per row (--packing): which examples share a row, and how many rows a step has.

Not to be confused with bert_tf/packing.py, which packs the segments of ONE example
([CLS] A [SEP] B [SEP]). Here a row of max_seq_length positions holds up to
MAX_EXAMPLES_PER_ROW whole examples side by side; the model keeps them apart (attention only
within an example, position ids restarting at each example's [CLS], each example's own [CLS]
read by the pooler: model/encoder.py), so every example's outputs are those it has alone in a
row of its own (Krell et al., "Efficient Sequence Packing without Cross-contamination",
arXiv 2107.02027, describe the same model changes).

Pure Python and NumPy, like length_buckets.py; the tf.data side is in
training/input_pipeline.py (pack_batch, packed_dataset).

The modes (--packing):
  auto:   exact where it changes nothing but speed, none elsewhere (resolve).
  none:   one example per row (the original's batches; --length_buckets cuts them).
  exact:  each step holds exactly the train_batch_size examples of the unpacked run, in the
          same order of the data, packed into the fewest rows first-fit decreasing finds; the
          row count is rounded up to ROW_LADDER so a run compiles a bounded number of programs.
          The optimisation is the unpacked run's by construction.
  static: a fixed number of rows per step (one shape: TPUs, --jit_compile); the examples of a
          window of the shuffled stream are packed first-fit decreasing and the rows taken in
          turn, so the examples per step vary around train_batch_size (static_rows picks the row
          count so that their mean is train_batch_size) and the loss is the mean over the real
          examples of the global batch.
"""

import math
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

MODES = ("none", "exact", "static", "auto")
NONE, EXACT, STATIC, AUTO = MODES
# At most this many examples share a row (a fixed K: the [CLS] positions are a [rows, K] input).
# Eight costs nothing on short text (mean ~28 pieces in rows of 128 is ~4.5 per row).
MAX_EXAMPLES_PER_ROW = 8
# Row counts a packed batch is rounded up to (then capped at the batch's example count): each
# is one program for XLA and the fused kernels. Every count up to 16 (a batch of 32 short
# sentences needs 6-9 rows), then steps of at most an eighth, so the rounding wastes at most
# an eighth of the rows.
_LADDER = tuple(range(1, 17)) + (18, 20, 22, 24, 26, 28, 30, 32, 36, 40, 44, 48, 52, 56, 60,
                                 64, 72, 80, 88, 96, 104, 112, 120, 128, 144, 160, 176, 192,
                                 208, 224, 240, 256)
LADDER = _LADDER  # public: the serving graph rounds its row counts the same way


class PackingError(ValueError):
  """A packing setting that cannot work (the message names the flag)."""


def check_mode(mode: str) -> str:
  """The mode, lower-cased; PackingError naming --packing for an unknown one."""
  value = (mode or NONE).strip().lower()
  if value not in MODES:
    raise PackingError(f"--packing must be one of {', '.join(MODES)}, got {mode!r}")
  return value


def resolve(mode: str, exact_task: bool, xla: bool) -> str:
  """--packing=auto made concrete: exact where packing changes nothing but speed (a task
  whose packed loss is the unpacked one: classification, tagging) and the step is not
  compiled per shape (no TPU, no --jit_compile: there each row count would be a program);
  none elsewhere (SQuAD, whose packed softmax leaves out the padding the original's counts;
  TPUs, which want one shape: choose static there). Other modes are returned as they are."""
  value = check_mode(mode)
  if value != AUTO:
    return value
  return EXACT if exact_task and not xla else NONE


def first_fit_decreasing(lengths: Sequence[int], row_length: int,
                         max_per_row: int = MAX_EXAMPLES_PER_ROW,
                         costs: Optional[Sequence[int]] = None,
                         cost_capacity: int = 0) -> List[List[int]]:
  """Rows of example indices: examples longest first, each into the first row it fits.

  An example fits a row when the row's lengths plus its own stay within row_length, the row
  holds fewer than max_per_row examples and, with costs (e.g. each pretraining instance's
  masked positions), the row's costs plus its own stay within cost_capacity. Examples of length
  0 (padding examples: no real token) are placed in no row. Within a row the indices are
  ascending (the data's order), and rows are ordered by their first index, so the layout
  depends only on the lengths (and costs).

  Raises:
    PackingError: a length outside [0, row_length], or a cost above cost_capacity.
  """
  if max_per_row < 1:
    raise PackingError(f"a row holds at least one example, got max_per_row={max_per_row}")
  for i, length in enumerate(lengths):
    if not 0 <= length <= row_length:
      raise PackingError(f"example {i} has length {length}, outside [0, {row_length}]")
  if costs is not None:
    for i, cost in enumerate(costs):
      if cost > cost_capacity:
        raise PackingError(f"example {i} costs {cost}, above a row's {cost_capacity}")
  order = sorted((i for i, n in enumerate(lengths) if n > 0), key=lambda i: (-lengths[i], i))
  rows: List[List[int]] = []
  free: List[int] = []
  budget: List[int] = []
  for i in order:
    cost = costs[i] if costs is not None else 0
    for r, space in enumerate(free):
      if space >= lengths[i] and len(rows[r]) < max_per_row and budget[r] >= cost:
        rows[r].append(i)
        free[r] -= lengths[i]
        budget[r] -= cost
        break
    else:
      rows.append([i])
      free.append(row_length - lengths[i])
      budget.append(cost_capacity - cost)
  rows = [sorted(row) for row in rows]
  rows.sort(key=lambda row: row[0])
  return rows


def row_ladder(max_rows: int) -> Tuple[int, ...]:
  """The row counts a packed batch of at most max_rows rows may have: _LADDER's entries below
  max_rows, and max_rows itself (beyond 256, multiples of 32)."""
  if max_rows < 1:
    raise PackingError(f"a batch has at least one row, got {max_rows}")
  ladder = [n for n in _LADDER if n < max_rows]
  n = _LADDER[-1] + 32
  while n < max_rows:
    ladder.append(n)
    n += 32
  return tuple(ladder) + (max_rows,)


def best_width(lengths: Sequence[int], widths: Sequence[int],
               max_per_row: int = MAX_EXAMPLES_PER_ROW,
               rows: Optional[Callable[[int], int]] = None) -> Tuple[int, int]:
  """(row width, row count): the fewest rows first-fit decreasing needs at the widest of
  `widths` (the count rounded by `rows`, e.g. ladder_rows), in the narrowest width that holds
  the examples in no more rows.

  Rows only get narrower when that costs no extra row: a batch of a few short examples is one
  short row, while full batches keep the widest rows, so a run meets few shapes (each one a
  compile of the fused kernels, and of the step under XLA). Choosing the width of fewest
  positions instead finds a few percent more real tokens but three times the shapes.
  """
  longest = max([n for n in lengths] + [1])
  ordered = sorted(set(widths))
  if ordered[-1] < longest:
    raise PackingError(f"an example of {longest} positions is longer than every row width "
                       f"({', '.join(map(str, widths))})")

  def count(width):
    needed = max(len(first_fit_decreasing(lengths, width, max_per_row)), 1)
    return rows(needed) if rows is not None else needed

  fewest = count(ordered[-1])
  for width in ordered:
    if width >= longest and (width == ordered[-1] or count(width) <= fewest):
      return width, fewest
  return ordered[-1], fewest  # not reached: the widest width always qualifies


def ladder_rows(needed: int, max_rows: int) -> int:
  """The smallest entry of row_ladder(max_rows) that is at least `needed` (at least 1)."""
  for n in row_ladder(max_rows):
    if n >= needed:
      return n
  raise PackingError(f"{needed} rows needed but a batch has at most {max_rows}")


def exact_shape(lengths: Sequence[int], widths: Sequence[int], max_rows: int,
                max_per_row: int = MAX_EXAMPLES_PER_ROW, multiple: int = 1
                ) -> Tuple[int, Union[int, Callable[[int], int]]]:
  """(row width, rows) of an exactly packed batch (--packing=exact, every task and
  extract_features): the width best_width picks among `widths` (the longest example must fit),
  and the row count rounded up to row_ladder(max_rows) and then to a multiple of `multiple`
  (the replicas: each takes whole rows). With one width the count is returned as the rounding
  function, for pack_arrays to apply to the rows its own plan needs (no second plan)."""

  def count(needed: int) -> int:
    rounded = ladder_rows(needed, max_rows)
    return -(-rounded // multiple) * multiple

  lengths = [int(n) for n in lengths]
  ordered = sorted(set(widths))
  if len(ordered) == 1:
    longest = max(lengths + [1])
    if longest > ordered[0]:
      raise PackingError(f"an example of {longest} positions is longer than the row width "
                         f"{ordered[0]}")
    return ordered[0], count
  return best_width(lengths, ordered, max_per_row, count)


def expected_rows(length_counts: Sequence[int], batch_size: int, row_length: int,
                  max_per_row: int = MAX_EXAMPLES_PER_ROW, samples: int = 64,
                  seed: int = 0) -> float:
  """The mean number of rows first_fit_decreasing needs for batch_size examples drawn from the
  length distribution length_counts (count of examples per length), by sampling."""
  counts = np.asarray(length_counts, np.float64)
  counts[0] = 0.0  # padding examples take no row
  if counts.sum() <= 0:
    return 1.0
  rng = np.random.default_rng(seed)
  draws = rng.choice(len(counts), size=(samples, batch_size), p=counts / counts.sum())
  return float(np.mean([len(first_fit_decreasing(list(d), row_length, max_per_row))
                        for d in draws]))


def static_rows(length_counts: Sequence[int], batch_size: int, row_length: int,
                max_per_row: int = MAX_EXAMPLES_PER_ROW, window: int = 0) -> int:
  """Rows per step in static mode: batch_size examples per step on average.

  The stream is packed a window at a time (default: 8 batches' worth), so the mean examples
  per row is that of packing `window` examples (estimated by sampling windows from the length
  distribution); the row count is batch_size over it, rounded up, at least 1, so the mean
  examples per step is batch_size or a little less (up to the estimate's sampling error).
  """
  window = window or 8 * batch_size
  rows = expected_rows(length_counts, window, row_length, max_per_row, samples=8)
  per_row = window / max(rows, 1e-9)
  return max(1, int(math.ceil(batch_size / per_row - 1e-9)))


def pack_plan(lengths: Sequence[int], row_length: int, max_per_row: int = MAX_EXAMPLES_PER_ROW,
              costs: Optional[Sequence[int]] = None, cost_capacity: int = 0
              ) -> List[List[Tuple[int, int]]]:
  """first_fit_decreasing's rows as (example index, offset in the row) pairs."""
  plan = []
  for row in first_fit_decreasing(lengths, row_length, max_per_row, costs, cost_capacity):
    offset, placed = 0, []
    for i in row:
      placed.append((i, offset))
      offset += lengths[i]
    plan.append(placed)
  return plan


# The packed batch's own features (beside the task's): the position of each token within its
# example, and the position in the row of each example's [CLS] ([rows, K]; 0 for an empty slot).
POSITION_IDS = "input_position_ids"
CLS_POSITIONS = "packed_cls_positions"


def real_lengths(input_mask: np.ndarray) -> np.ndarray:
  """int [...]: one past the last real position of each row of input_mask [..., L]."""
  mask = np.asarray(input_mask) > 0
  positions = np.arange(1, mask.shape[-1] + 1)
  return np.max(np.where(mask, positions, 0), axis=-1)


def pack_arrays(token_features: Mapping[str, np.ndarray],
                example_features: Mapping[str, np.ndarray], row_length: int,
                rows: Union[None, int, Callable[[int], int]] = None, max_per_row: int = MAX_EXAMPLES_PER_ROW,
                fill: Optional[Mapping[str, object]] = None, mask_key: str = "input_mask",
                prediction_features: Optional[Mapping[str, np.ndarray]] = None,
                predictions_per_row: int = 0) -> Dict[str, np.ndarray]:
  """Packs a batch of B examples into rows of row_length positions.

  Args:
    token_features: name -> [B, L] per-position features (L <= row_length), input_mask among
      them (mask_key); an example is its first real_lengths() positions.
    example_features: name -> [B, ...] per-example features (labels, weights, indices).
    row_length: positions per row.
    rows: the number of rows to return (at least what first_fit_decreasing needs); None for
      exactly what it needs (at least 1); or a function of what it needs (e.g. ladder_rows).
    max_per_row: K, examples per row at most.
    fill: value of a per-example feature in an empty slot (default 0).
    mask_key: the token feature that marks real positions.
    prediction_features: pretraining's masked_lm_positions, masked_lm_ids and
      masked_lm_weights [B, P]: an example's predictions are its slots of non-zero weight; in
      the row they are concatenated in slot order into predictions_per_row slots, positions
      moved by the example's offset, the rest 0 (weight 0). Rows are filled so that their
      predictions fit (first_fit_decreasing's costs).

  Returns:
    The token features [rows, row_length] with each example's positions moved into its row
    (input_mask holding the example's slot in the row, 1..K, and 0 for padding), POSITION_IDS
    [rows, row_length] (0, 1, ... within each example), CLS_POSITIONS [rows, K], and each
    example feature [rows * K, ...] in slot order (row-major: example k of row r at r * K + k),
    empty slots holding `fill`.

  Raises:
    PackingError: the examples need more than `rows` rows.
  """
  fill = dict(fill or {})
  mask = np.asarray(token_features[mask_key])
  lengths = real_lengths(mask)
  predictions = dict(prediction_features or {})
  costs = None
  if predictions:
    weights = np.asarray(predictions["masked_lm_weights"])
    costs = [int(c) for c in (weights > 0).sum(axis=1)]
  plan = pack_plan([int(n) for n in lengths], row_length, max_per_row, costs,
                   predictions_per_row)
  count = max(len(plan), 1)
  if callable(rows):
    count = rows(count)
  elif rows is not None:
    count = rows
  if len(plan) > count:
    raise PackingError(f"{len(plan)} rows needed for {len(lengths)} examples, {count} given")
  out: Dict[str, np.ndarray] = {}
  for name, value in token_features.items():
    value = np.asarray(value)
    out[name] = np.zeros((count, row_length) + value.shape[2:], value.dtype)
  positions = np.zeros((count, row_length), mask.dtype)
  cls = np.zeros((count, max_per_row), mask.dtype)
  for name, value in predictions.items():
    out[name] = np.zeros((count, predictions_per_row), np.asarray(value).dtype)
  for name, value in example_features.items():
    value = np.asarray(value)
    out[name] = np.full((count * max_per_row,) + value.shape[1:], fill.get(name, 0), value.dtype)
  for r, placed in enumerate(plan):
    used = 0
    for k, (i, offset) in enumerate(placed):
      if predictions:
        real = np.flatnonzero(weights[i] > 0)
        for name, value in predictions.items():
          moved = np.asarray(value)[i, real]
          if name == "masked_lm_positions":
            moved = moved + offset
          out[name][r, used:used + len(real)] = moved
        used += len(real)
      n = lengths[i]
      for name, value in token_features.items():
        out[name][r, offset:offset + n] = value[i, :n]
      out[mask_key][r, offset:offset + n] = k + 1
      positions[r, offset:offset + n] = np.arange(n)
      cls[r, k] = offset
      for name, value in example_features.items():
        out[name][r * max_per_row + k] = value[i]
  out[POSITION_IDS] = positions
  out[CLS_POSITIONS] = cls
  return out
