"""Packed rows in tf.data (--packing; the layout is bert_tf.row_packing's): a batch of
examples packed into rows, static rows from a window of examples, and per-position outputs moved
back to each example's own positions."""

import dataclasses
import math
from typing import Dict, List, Mapping, Optional, Sequence

import tensorflow as tf

from bert_tf import length_buckets
from bert_tf import row_packing
from bert_tf.training.record_files import EXAMPLE_INDEX, as_written


@dataclasses.dataclass(frozen=True)
class PackingMode:
  """--packing parsed once (row_packing.check_mode): the one typed value the settings, the
  driver and the datasets read, instead of comparing the flag's string.

  Attributes:
    value: row_packing.NONE, EXACT, STATIC or AUTO (auto until a run resolves it).
  """
  value: str = row_packing.NONE

  @classmethod
  def parse(cls, flag: Optional[str]) -> "PackingMode":
    """The flag's mode, lower-cased; row_packing.PackingError naming --packing if unknown."""
    return cls(row_packing.check_mode(flag))

  @property
  def packed(self) -> bool:
    """Whether batches are packed rows (exact or static; auto is not resolved yet)."""
    return self.value in (row_packing.EXACT, row_packing.STATIC)

  @property
  def exact(self) -> bool:
    return self.value == row_packing.EXACT

  @property
  def static(self) -> bool:
    return self.value == row_packing.STATIC

  @property
  def auto(self) -> bool:
    return self.value == row_packing.AUTO

  def resolved(self, exact_task: bool, xla: bool) -> "PackingMode":
    """auto made concrete (row_packing.resolve); any other mode as it is."""
    return PackingMode(row_packing.resolve(self.value, exact_task=exact_task, xla=xla))


@dataclasses.dataclass(frozen=True)
class Packing:
  """How a dataset packs examples into rows (row_packing's module docstring has the modes).

  Attributes:
    mode: row_packing.EXACT or row_packing.STATIC (row_packing.NONE is no Packing at all).
    rows: static training: rows per replica batch (row_packing.static_rows).
    window: static training: examples of the shuffled stream packed together (0: 8 batches'
      worth of the rows' mean examples).
    max_per_row: K, examples per row at most.
  """
  mode: str
  rows: int = 0
  window: int = 0
  max_per_row: int = row_packing.MAX_EXAMPLES_PER_ROW

  @property
  def static(self) -> bool:
    return self.mode == row_packing.STATIC

  @property
  def exact(self) -> bool:
    return self.mode == row_packing.EXACT


def packed_position_share(length_counts: Sequence[int], batch_size: int, row_length: int,
                          boundaries: Optional[Sequence[int]] = None,
                          max_per_row: int = row_packing.MAX_EXAMPLES_PER_ROW) -> float:
  """The positions an exactly packed batch computes, over those of the same batch unpacked.

  Packed: row_packing.first_fit_decreasing's expected rows of row_length for batch_size examples drawn from
  length_counts (count of examples per length), rounded up to row_packing.row_ladder(batch_size). Unpacked:
  batch_size rows cut to the bucket of their longest (boundaries; None: row_length). Below 1
  packing computes fewer positions; near 1 it only adds its attention mask and gathers (e.g.
  pairs of about 50 tokens in rows of 64: one per row either way).
  """
  if sum(length_counts[1:]) <= 0:
    return 1.0
  rows = row_packing.ladder_rows(int(math.ceil(row_packing.expected_rows(
      length_counts, batch_size, row_length, max_per_row) - 1e-9)), batch_size)
  widths = tuple(boundaries) if boundaries else (row_length,)
  longest = length_buckets.batch_longest_distribution(length_counts, batch_size)
  unpacked = batch_size * length_buckets.expected_width(longest, widths)
  return rows * row_length / max(unpacked, 1e-9)



# === Packed rows (--packing; bert_tf.row_packing) ===


def _split_features(batch: Mapping[str, tf.Tensor], mask_key: str = "input_mask"):
  """(per-position keys, per-example keys) of a batch: a per-position feature has
  batch[mask_key]'s [B, L] shape, or [B, L, ...] (one vector per position, e.g. a tagger
  teacher's cached logits)."""
  length = batch[mask_key].shape[-1]
  tokens = [k for k, v in batch.items() if v.shape.rank >= 2 and v.shape[1] == length]
  return tokens, [k for k in batch if k not in tokens]


def pack_batch(batch: Mapping[str, tf.Tensor], max_per_row: int = row_packing.MAX_EXAMPLES_PER_ROW,
               rows: Optional[int] = None, widths: Optional[Sequence[int]] = None,
               prediction_keys: Sequence[str] = (), predictions_per_row: int = 0
               ) -> Dict[str, tf.Tensor]:
  """A batch of B examples ([B, L] per-position features, [B, ...] per-example ones) as packed
  rows (row_packing.pack_arrays): per-position features [R, W], input_position_ids [R, W],
  packed_cls_positions [R, K] and per-example features [R * K, ...] in slot order, an empty
  slot holding 0 (example_index -1).

  rows: a fixed R (rows of W = L); None for the fewest rows first-fit decreasing finds rounded
  up to row_packing.row_ladder(B), in rows of the narrowest width W among `widths` (length
  buckets; default L) that needs no more of them (row_packing.best_width): at most
  len(ladder) x len(widths) shapes, in practice a few (full batches keep rows of L).

  prediction_keys (pretraining's masked_lm_*, [B, P]) become [R, predictions_per_row]: each
  row's predictions in slot order, positions moved into the row (row_packing.pack_arrays);
  rows are then of width L.
  """
  tokens, examples = _split_features(batch)
  tokens = [k for k in tokens if k not in prediction_keys]
  examples = [k for k in examples if k not in prediction_keys]
  length = batch["input_mask"].shape[-1]
  size = batch["input_mask"].shape[0]
  prediction_keys = list(prediction_keys)
  out_keys = (tokens + [row_packing.POSITION_IDS, row_packing.CLS_POSITIONS] + examples
              + prediction_keys)
  dtypes = ([batch[k].dtype for k in tokens] + [batch["input_mask"].dtype] * 2
            + [batch[k].dtype for k in examples + prediction_keys])
  choices = tuple(w for w in (widths or (length,)) if w <= length) or (length,)
  if prediction_keys:
    choices = (length,)

  def pack(*arrays):
    token_arrays = dict(zip(tokens, arrays[:len(tokens)]))
    rest = arrays[len(tokens):]
    width, count = length, rows
    if not rows:
      width, count = row_packing.exact_shape(
          row_packing.real_lengths(token_arrays["input_mask"]), choices,
          size or len(arrays[0]), max_per_row)
    out = row_packing.pack_arrays(
        {k: v[:, :width] for k, v in token_arrays.items()},
        dict(zip(examples, rest[:len(examples)])), width, rows=count,
        max_per_row=max_per_row, fill={EXAMPLE_INDEX: -1},
        prediction_features=dict(zip(prediction_keys, rest[len(examples):])),
        predictions_per_row=predictions_per_row)
    return [out[k] for k in out_keys]

  values = tf.numpy_function(pack, [batch[k] for k in tokens + examples + prediction_keys],
                             dtypes, stateful=False)
  out = {}
  for key, value in zip(out_keys, values):
    if key in prediction_keys:
      value.set_shape([rows or None, predictions_per_row])
    elif key in examples:
      value.set_shape([rows * max_per_row if rows else None] + batch[key].shape[1:].as_list())
    else:
      trailing = batch[key].shape[2:].as_list() if key in batch else []
      value.set_shape([rows or None, max_per_row if key == row_packing.CLS_POSITIONS
                       else length if rows or len(choices) == 1 else None] + trailing)
    out[key] = value
  return out


def _rows_of(batch: Mapping[str, tf.Tensor], max_per_row: int,
             skip: Sequence[str] = ()) -> Dict[str, tf.Tensor]:
  """A packed batch's per-example features [R * K, ...] as [R, K, ...] (one entry per row)."""
  out = dict(batch)
  for key in _per_example_keys(batch):
    if key in skip:
      continue
    value = batch[key]
    out[key] = tf.reshape(value, tf.concat([[-1, max_per_row], tf.shape(value)[1:]], 0))
  return out


def _per_example_keys(batch: Mapping[str, tf.Tensor]) -> List[str]:
  tokens, examples = _split_features(batch)
  return [k for k in examples if k != row_packing.CLS_POSITIONS]


def _examples_of(rows: Mapping[str, tf.Tensor], per_example: Sequence[str]
                 ) -> Dict[str, tf.Tensor]:
  """The inverse of _rows_of after batching rows: [R, K, ...] -> [R * K, ...]."""
  out = dict(rows)
  for key in per_example:
    value = rows[key]
    shape = value.shape.as_list()
    flat = None if shape[0] is None or shape[1] is None else shape[0] * shape[1]
    out[key] = tf.ensure_shape(
        tf.reshape(value, tf.concat([[-1], tf.shape(value)[2:]], 0)), [flat] + shape[2:])
  return out


def is_packed(batch: Mapping[str, tf.Tensor]) -> bool:
  return row_packing.CLS_POSITIONS in batch


def unpack_positions(value: tf.Tensor, batch: Mapping[str, tf.Tensor], pad_value) -> tf.Tensor:
  """A per-position value of packed rows [R, S, ...] as one row per slot [R * K, S, ...]: slot
  k of row r holds its example's positions from its [CLS] on (position j of the example at
  j), and pad_value past the example's end (all of an empty slot), as the example's own row
  would hold it with its padding replaced by pad_value."""
  cls = tf.cast(batch[row_packing.CLS_POSITIONS], tf.int32)  # [R, K]
  slots = tf.cast(batch["input_mask"], tf.int32)  # [R, S]
  rows, width, k = tf.shape(slots)[0], tf.shape(slots)[1], tf.shape(cls)[1]
  index = cls[:, :, None] + tf.range(width)[None, None, :]  # [R, K, S]
  inside = index < width
  flat = tf.reshape(tf.minimum(index, width - 1), [rows, k * width])
  own = tf.reshape(tf.gather(slots, flat, batch_dims=1), [rows, k, width]) == (
      tf.range(k)[None, :, None] + 1)
  valid = tf.reshape(inside & own, [rows * k, width])
  gathered = tf.gather(value, flat, batch_dims=1)  # [R, K * S, ...]
  rest = tf.shape(value)[2:]
  gathered = tf.reshape(gathered, tf.concat([[rows * k, width], rest], 0))
  valid = tf.reshape(valid, tf.concat([[rows * k, width], tf.ones_like(rest)], 0))
  out = tf.where(valid, gathered, tf.cast(pad_value, value.dtype))
  return tf.ensure_shape(out, [None, value.shape[1]] + value.shape[2:].as_list())


def static_rows_dataset(parsed_windows: tf.data.Dataset, packing: Packing,
                        prediction_keys: Sequence[str] = (), predictions_per_row: int = 0
                        ) -> tf.data.Dataset:
  """Static packing of a stream: each parsed window of examples packed into rows (as many as
  it needs), the rows taken packing.rows at a time (the last partial batch dropped)."""
  k = packing.max_per_row
  # The window's per-example features (labels, indices, weights) stay per-example in the rows.
  per_example = [key for key in _split_features(parsed_windows.element_spec)[1]
                 if key not in prediction_keys]

  def window_rows(window):
    packed = pack_batch(window, k, prediction_keys=prediction_keys,
                        predictions_per_row=predictions_per_row)
    return tf.data.Dataset.from_tensor_slices(_rows_of(packed, k, prediction_keys))

  dataset = parsed_windows.flat_map(as_written(window_rows))
  dataset = dataset.batch(packing.rows, drop_remainder=True)
  return dataset.map(as_written(lambda rows: _examples_of(rows, per_example)),
                     num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
