"""Length buckets of fine-tuning batches: each batch cut to the narrowest bucket that holds
its longest example (--length_buckets), the length counts of a record file that the buckets are
fitted to, and the length-grouping constants (--group_by_length).

An example may hold several sequences (a multiple-choice example, one per choice): its record's
per-position features are then [sequences, max_seq_length] (its task's record spec says so),
its length is that of its longest sequence (record_lengths: what decides a batch's bucket), and
the input pipeline reads its sequences as rows of their own (as_sequences), each with the index
of its example in the batch and its own index among the example's sequences, before a batch is
cut or packed, so that packing places each sequence where it fits."""

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
# The features as_sequences adds to each sequence of a multi-sequence example: which of its
# example's sequences it is (a choice), and the example's position in its batch.
SEQUENCE_INDEX = "sequence_index"
BATCH_EXAMPLE = "batch_example"


def real_length(input_mask: tf.Tensor) -> tf.Tensor:
  """int32 [...]: one past the last real position of each row of input_mask [..., L]."""
  mask = tf.cast(input_mask, tf.int32) > 0
  positions = tf.range(1, tf.shape(mask)[-1] + 1, dtype=tf.int32)
  return tf.reduce_max(tf.where(mask, positions, 0), axis=-1)


def bucket_length(input_mask: tf.Tensor, boundaries: Sequence[int]) -> tf.Tensor:
  """int32 scalar: the longest real row of input_mask (any rank) rounded up to a boundary."""
  longest = tf.reduce_max(tf.concat([tf.reshape(real_length(input_mask), [-1]), [0]], 0))
  return length_buckets.bucket_width_tensor(longest, boundaries)


def record_lengths(input_mask: tf.Tensor) -> tf.Tensor:
  """int32 [N]: the real length of each record of input_mask [N, L] (or [N, sequences, L]: the
  length of its longest sequence)."""
  lengths = real_length(input_mask)
  if lengths.shape.rank > 1:
    lengths = tf.reduce_max(lengths, axis=list(range(1, lengths.shape.rank)))
  return lengths


def sequences_per_record(input_file: str, max_seq_length: int) -> int:
  """How many sequences each record of a fine-tuning record file holds: its input_mask's length
  over max_seq_length, read from the first record (1 for an empty file)."""
  for serialized in autotuning_off(tf.data.TFRecordDataset(input_file).take(1)):
    example = tf.train.Example.FromString(serialized.numpy())
    values = len(example.features.feature["input_mask"].int64_list.value)
    return max(1, values // max_seq_length)
  return 1


def as_sequences(batch: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
  """A batch of B multi-sequence examples (per-position features [B, C, L], per-example ones
  [B, ...]) as B * C sequences: the per-position features [B * C, L] (example b's sequences at
  rows b * C .. b * C + C - 1), each per-example feature repeated for every sequence of its
  example, SEQUENCE_INDEX (0 .. C - 1) and BATCH_EXAMPLE (b) [B * C] int32. A batch of
  one-sequence examples ([B, L]) is returned as it is."""
  mask = batch["input_mask"]
  if mask.shape.rank < 3:
    return dict(batch)
  count = mask.shape[1]
  size = tf.shape(mask)[0]
  out = {}
  for key, value in batch.items():
    if value.shape.rank == 3 and value.shape[1] == count:
      out[key] = tf.reshape(value, tf.concat([[-1], tf.shape(value)[2:]], 0))
    else:
      out[key] = tf.repeat(value, count, axis=0)
  out[SEQUENCE_INDEX] = tf.tile(tf.range(count, dtype=tf.int32), [size])
  out[BATCH_EXAMPLE] = tf.repeat(tf.range(size, dtype=tf.int32), count)
  return out


def length_counts(input_file: str, max_seq_length: int, per_sequence: bool = False) -> List[int]:
  """How many records of a fine-tuning record file have each real length: a list of
  max_seq_length + 1 counts (index = one past the last real position of input_mask; a record
  of several sequences counts at its longest: record_lengths, or with per_sequence each of its
  sequences at its own length, as packed rows take them). Reads the file once, only its
  input_mask."""
  sequences = sequences_per_record(input_file, max_seq_length)
  shape = [max_seq_length] if sequences == 1 else [sequences, max_seq_length]
  spec = {"input_mask": tf.io.FixedLenFeature(shape, tf.int64)}

  def lengths(mask):
    if per_sequence:
      mask = tf.reshape(mask, [-1, max_seq_length])
    return record_lengths(mask)

  counts_per_batch = tf.data.TFRecordDataset(input_file).batch(4096).map(
      as_written(lambda serialized: tf.math.bincount(
          lengths(tf.io.parse_example(serialized, spec)["input_mask"]),
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
  """The batch with every per-position feature (same rank and length as batch[mask_key], or
  one more axis after the positions: a vector per position) cut to bucket_length: the
  positions dropped are padding of every row, so the model's outputs at the kept positions are
  those of the full batch. Packed rows are cut the same way (their input_mask is non-zero at
  every real position)."""
  mask = batch[mask_key]
  width = bucket_length(mask, boundaries)
  rank, length = mask.shape.rank, mask.shape[-1]

  def cut(key, value):
    if key == row_packing.CLS_POSITIONS:
      return value
    if value.shape.rank == rank and value.shape[-1] == length:
      return value[..., :width]
    if value.shape.rank == rank + 1 and value.shape[rank - 1] == length:
      return value[..., :width, :]
    return value

  return {key: cut(key, value) for key, value in batch.items()}
