"""Length buckets of fine-tuning batches: each batch cut to the narrowest bucket that holds
its longest example (--length_buckets), the length counts of a record file that the buckets are
fitted to, and the length-grouping constants (--group_by_length)."""

from typing import Dict, List, Mapping, Sequence, Tuple

import tensorflow as tf

from bert_tf import length_buckets
from bert_tf import row_packing
from bert_tf.training.record_files import as_written, autotuning_off

GROUP_WINDOW_BATCHES = 50
# Records in the shuffle buffer before grouping: the whole file for any fine-tuning set up to
# this size (SQuAD v1.1's 88k windows hold about 0.3 GB here), a wide sample of a bigger one.
# Sorting a window of a nearly file-ordered stream (the original's buffer of 100) would put
# the windows of one paragraph, or the lines of one source, in one batch: Hugging Face's
# group_by_length likewise draws its mega-batches from a random permutation of the whole set.
GROUP_SHUFFLE_RECORDS = 1 << 17


def real_length(input_mask: tf.Tensor) -> tf.Tensor:
  """int32 [...]: one past the last real position of each row of input_mask [..., L]."""
  mask = tf.cast(input_mask, tf.int32) > 0
  positions = tf.range(1, tf.shape(mask)[-1] + 1, dtype=tf.int32)
  return tf.reduce_max(tf.where(mask, positions, 0), axis=-1)


def bucket_length(input_mask: tf.Tensor, boundaries: Sequence[int]) -> tf.Tensor:
  """int32 scalar: the longest real row of input_mask (any rank) rounded up to a boundary."""
  longest = tf.reduce_max(tf.concat([tf.reshape(real_length(input_mask), [-1]), [0]], 0))
  return length_buckets.bucket_width_tensor(longest, boundaries)


def length_counts(input_file: str, max_seq_length: int) -> List[int]:
  """How many records of a fine-tuning record file have each real length: a list of
  max_seq_length + 1 counts (index = one past the last real position of input_mask). Reads
  the file once, only its input_mask."""
  spec = {"input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64)}
  counts_per_batch = tf.data.TFRecordDataset(input_file).batch(4096).map(
      as_written(lambda serialized: tf.math.bincount(
          real_length(tf.io.parse_example(serialized, spec)["input_mask"]),
          minlength=max_seq_length + 1, maxlength=max_seq_length + 1, dtype=tf.int64)),
      num_parallel_calls=tf.data.AUTOTUNE)
  counts = autotuning_off(counts_per_batch).reduce(
      tf.zeros([max_seq_length + 1], tf.int64), as_written(lambda total, c: total + c))
  return [int(c) for c in counts.numpy()]


def fitted_buckets(input_file: str, max_seq_length: int, rows: int,
                   multiple: int = 1) -> Tuple[int, ...]:
  """--length_buckets=auto for batches of `rows` records drawn from input_file:
  length_buckets.fit_buckets on the file's length_counts."""
  return length_buckets.fit_buckets(length_counts(input_file, max_seq_length), rows,
                                    max_seq_length, multiple=multiple)


def cut_to_bucket(batch: Mapping[str, tf.Tensor], boundaries: Sequence[int],
                  mask_key: str = "input_mask") -> Dict[str, tf.Tensor]:
  """The batch with every per-position feature (same rank and length as batch[mask_key]) cut
  to bucket_length: the positions dropped are padding of every row, so the model's outputs at
  the kept positions are those of the full batch. Packed rows are cut the same way (their
  input_mask is non-zero at every real position)."""
  mask = batch[mask_key]
  width = bucket_length(mask, boundaries)
  rank, length = mask.shape.rank, mask.shape[-1]
  return {key: value[..., :width] if (value.shape.rank == rank and value.shape[-1] == length
                                      and key != row_packing.CLS_POSITIONS)
          else value for key, value in batch.items()}
