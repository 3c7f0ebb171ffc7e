"""Packed request batches: a served batch's texts several to a row, answers as if alone.

A batch of requests arrives padded to its longest text; the shorter ones fill the rest of
their rows with padding that the encoder computes like any token. Here, inside the serving
graph (TF Serving runs no Python), the batch's examples are packed into rows of the same
width with bert_tf.row_packing's layout and plan: first-fit decreasing, at most
row_packing.MAX_EXAMPLES_PER_ROW examples per row, attention within each example, position ids
restarting at each [CLS] (the model's packed inputs are the ones training uses). The row count
is rounded up to row_packing.row_ladder, so a server meets a bounded set of shapes: widths from
the export's length buckets, row counts from the ladder. The outputs are unpacked to the
unpacked batch's shapes: per-example outputs one row per text, per-position outputs at the
batch's width with `fill` at each text's padding positions. An example's real positions get
the values it gets alone in a row of its own (to float32 round-off; tested per export).

`plan_rows` is row_packing.pack_plan in graph ops; tests hold the two equal.

Shape legend: B = examples, W = the batch's padded width, R = rows, K = examples per row.
"""

from typing import Any, Callable, Dict, Mapping, Optional

import tensorflow as tf

from bert_tf import row_packing
from bert_tf.model.encoder import ENCODER_INPUTS

# What row_packing.pack_arrays calls the packed rows' own inputs.
POSITION_IDS, CLS_POSITIONS = row_packing.POSITION_IDS, row_packing.CLS_POSITIONS


def plan_rows(lengths: tf.Tensor, row_width, max_per_row: int = row_packing.MAX_EXAMPLES_PER_ROW):
  """first-fit decreasing as row_packing.pack_plan lays it out, in graph ops.

  Args:
    lengths: int32 [B], each in [1, row_width].
    row_width: positions per row (int or int32 scalar).
    max_per_row: K.

  Returns:
    (row, slot, offset, rows): int32 [B] each example's row, its slot in the row (0-based) and
    its first position; rows, the number of rows used. Rows are ordered by their first
    example and examples within a row by index, as pack_plan orders them.
  """
  lengths = tf.cast(lengths, tf.int32)
  count = tf.size(lengths)
  order = tf.argsort(-lengths, stable=True)  # longest first, ties in index order
  index = tf.range(count)

  def place(i, free, filled, used, row_of):
    example = order[i]
    length = lengths[example]
    fits = (free >= length) & (filled < max_per_row) & (index < used)
    row = tf.where(tf.reduce_any(fits),
                   tf.argmax(tf.cast(fits, tf.int32), output_type=tf.int32), used)
    at = tf.reshape(row, [1, 1])
    return (i + 1, tf.tensor_scatter_nd_sub(free, at, [length]),
            tf.tensor_scatter_nd_add(filled, at, [1]), tf.maximum(used, row + 1),
            tf.tensor_scatter_nd_update(row_of, tf.reshape(example, [1, 1]), [row]))

  start = (tf.constant(0), tf.fill([count], tf.cast(row_width, tf.int32)),
           tf.zeros([count], tf.int32), tf.constant(0), tf.zeros([count], tf.int32))
  _, _, _, used, placed = tf.while_loop(lambda i, *_: i < count, place, start)
  # Canonical layout: within a row the examples in index order, rows by their first example.
  same_row = tf.equal(placed[:, tf.newaxis], placed[tf.newaxis, :])  # [B, B]
  before = same_row & (index[tf.newaxis, :] < index[:, tf.newaxis])
  slot = tf.reduce_sum(tf.cast(before, tf.int32), axis=1)
  offset = tf.reduce_sum(tf.where(before, lengths[tf.newaxis, :], 0), axis=1)
  first_of_row = tf.reduce_min(tf.where(same_row, index[tf.newaxis, :], count), axis=1)
  is_first = tf.equal(slot, 0)
  row = tf.reduce_sum(tf.cast(is_first[tf.newaxis, :]
                              & (index[tf.newaxis, :] < first_of_row[:, tf.newaxis]), tf.int32),
                      axis=1)
  return row, slot, offset, used


def ladder_rows(needed: tf.Tensor, max_rows: tf.Tensor) -> tf.Tensor:
  """row_packing.ladder_rows in graph ops: the smallest ladder entry >= needed, at most
  max_rows (needed <= max_rows)."""
  ladder = tf.constant(row_packing.LADDER, tf.int32)
  above = tf.boolean_mask(ladder, ladder >= needed)
  beyond = -(-needed // 32) * 32  # past the ladder's last entry: multiples of 32
  rounded = tf.cond(tf.size(above) > 0, lambda: above[0], lambda: beyond)
  return tf.minimum(rounded, max_rows)


def row_cost(rows: tf.Tensor, width: tf.Tensor, hidden_size: int) -> tf.Tensor:
  """The encoder's work on [rows, width] inputs, in units of one position's projections: per
  position 24 H^2 flops of projections and feed-forward, and 4 width H of attention."""
  width = tf.cast(width, tf.float32)
  return tf.cast(rows, tf.float32) * width * (1.0 + width / (6.0 * hidden_size))


def _choose_width(lengths, width, max_width: int, hidden_size: int, max_per_row: int):
  """(plan, row width): rows of the batch's width, or of twice it (at most max_width) where
  that makes less work (row_cost): two short examples then share a row that the longest
  example alone would have left half empty."""
  batch = tf.size(lengths)
  narrow = plan_rows(lengths, width, max_per_row)
  wide_width = tf.minimum(2 * width, max_width)
  if max_width <= 0:
    return narrow, width

  def wide():
    plan = plan_rows(lengths, wide_width, max_per_row)
    return plan, wide_width

  def keep():
    return narrow, width

  wide_plan, chosen = tf.cond(wide_width > width, wide, keep)
  use_wide = (row_cost(ladder_rows(wide_plan[3], batch), chosen, hidden_size)
              < row_cost(ladder_rows(narrow[3], batch), width, hidden_size))
  plan = [tf.where(use_wide, a, b) for a, b in zip(wide_plan, narrow)]
  return plan, tf.where(use_wide, chosen, width)


def pack(inputs: Mapping[str, tf.Tensor], max_width: int = 0, hidden_size: int = 768,
         max_per_row: int = row_packing.MAX_EXAMPLES_PER_ROW):
  """Packs a batch [B, W] of suffix-padded examples into rows.

  Args:
    inputs: the encoder's three inputs [B, W], padding a suffix of each row.
    max_width: the widest row allowed (the model's max_position_embeddings); rows are W wide,
      or 2W (at most max_width) when row_cost says that is less work. 0: always W.
    hidden_size: H, for row_cost.
    max_per_row: K.

  Returns:
    (packed, where): packed holds the encoder's three inputs [R, row width] (input_mask
    holding each position's slot, 1..K, 0 for padding), POSITION_IDS and CLS_POSITIONS
    [R, K]; where = (row, slot, offset, lengths), int32 [B] each, for the unpack functions.
  """
  ids = {key: tf.cast(inputs[key], tf.int32) for key in ENCODER_INPUTS}
  shape = tf.shape(ids["input_word_ids"])
  batch, width = shape[0], shape[1]
  lengths = tf.reduce_sum(tf.cast(ids["input_mask"] > 0, tf.int32), axis=1)
  (row, slot, offset, used), row_width = _choose_width(lengths, width, max_width, hidden_size,
                                                       max_per_row)
  rows = ladder_rows(used, batch)
  tokens = tf.ragged.range(lengths)  # [B, (n)]: each example's positions
  example = tf.cast(tokens.value_rowids(), tf.int32)
  position = tokens.flat_values
  source = tf.stack([example, position], axis=1)
  target = tf.stack([tf.gather(row, example), tf.gather(offset, example) + position], axis=1)
  packed_shape = tf.stack([rows, row_width])

  def scatter(values):
    return tf.scatter_nd(target, values, packed_shape)

  packed = {key: scatter(tf.gather_nd(ids[key], source))
            for key in ("input_word_ids", "input_type_ids")}
  packed["input_mask"] = scatter(tf.gather(slot, example) + 1)
  packed[POSITION_IDS] = scatter(position)
  packed[CLS_POSITIONS] = tf.scatter_nd(tf.stack([row, slot], axis=1), offset,
                                        tf.stack([rows, max_per_row]))
  return packed, (row, slot, offset, lengths)


def unpack_per_position(values: tf.Tensor, where, width, fill) -> tf.Tensor:
  """[R, W, ...] outputs of packed rows -> [B, W, ...] per example, `fill` at padding."""
  row, _, offset, lengths = where
  position = tf.range(width)[tf.newaxis, :]  # [1, W]
  real = position < lengths[:, tf.newaxis]  # [B, W]
  at = tf.minimum(offset[:, tf.newaxis] + position, tf.shape(values)[1] - 1)
  index = tf.stack([tf.broadcast_to(row[:, tf.newaxis], tf.shape(at)), at], axis=-1)
  return where_real(tf.gather_nd(values, index), real, fill)


def where_real(values: tf.Tensor, real: tf.Tensor, fill) -> tf.Tensor:
  """values [B, W, ...] with `fill` where real [B, W] is False (padding positions)."""
  real = tf.reshape(real, tf.concat([tf.shape(real), tf.ones([tf.rank(values) - 2], tf.int32)],
                                    axis=0))
  return tf.where(real, values, tf.cast(fill, values.dtype))


def map_outputs(outputs: Mapping[str, Any], per_example, example_fn: Callable,
                position_fn: Callable) -> Dict[str, Any]:
  """example_fn(value) for the outputs named in per_example (one row per example), else
  position_fn(value, name) (per position; a list of them, encoder_outputs, element by
  element)."""
  result = {}
  for key, value in outputs.items():
    if key in per_example:
      result[key] = example_fn(value)
    elif isinstance(value, (list, tuple)):
      result[key] = [position_fn(v, key) for v in value]
    else:
      result[key] = position_fn(value, key)
  return result


def unpack_per_example(values: tf.Tensor, where,
                       max_per_row: int = row_packing.MAX_EXAMPLES_PER_ROW) -> tf.Tensor:
  """[R * K, ...] outputs (slot order) -> [B, ...] per example."""
  row, slot, _, _ = where
  return tf.gather(values, row * max_per_row + slot)


def call_packed(model: Callable, inputs: Mapping[str, tf.Tensor], per_example,
                fill: Optional[Mapping[str, float]] = None, max_width: int = 0,
                hidden_size: int = 768) -> Dict[str, tf.Tensor]:
  """model(packed inputs, position_ids, cls_positions) on the batch packed (pack's max_width
  and hidden_size), its outputs unpacked: the names in `per_example` one row per example, the
  others per position at the batch's width with fill[name] (default 0) at padding; a list of
  per-position outputs (encoder_outputs) is unpacked element by element."""
  fill = dict(fill or {})
  packed, where = pack(inputs, max_width, hidden_size)
  outputs = model({key: packed[key] for key in ENCODER_INPUTS}, packed[POSITION_IDS],
                  packed[CLS_POSITIONS])
  width = tf.shape(inputs["input_word_ids"])[1]
  return map_outputs(outputs, per_example, lambda value: unpack_per_example(value, where),
                     lambda value, key: unpack_per_position(value, where, width,
                                                            fill.get(key, 0.0)))
