"""TFRecords -> tf.data batches with static shapes: pretraining's and fine-tuning's datasets.

Every batch has fixed shapes (drop_remainder=True) so that XLA and TPUs compile the training step
once. Features are the schema's canonical names (bert_tf.record_schema), whatever names the files
store, renamed once to the models' input names (input_word_ids, input_type_ids: TF Hub's), and
integer features are cast to int32 (TPUs have no int64 matmul/gather path).

What the datasets are built from has modules of its own: reading the files and the end every
pipeline shares (training.record_files), dynamic masking (training.remasking), length buckets
(training.bucketing) and packed rows (training.packed_rows).

Shape legend: B = per-replica batch, L = max_seq_length, P = max_predictions_per_seq.
"""

from typing import Dict, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from absl import logging
import tensorflow as tf

from bert_tf import length_buckets
from bert_tf import record_schema
from bert_tf import row_packing
from bert_tf.length_buckets import auto_buckets
from bert_tf.training.bucketing import (GROUP_SHUFFLE_RECORDS, GROUP_WINDOW_BATCHES, as_sequences,
                                        cut_to_bucket, record_lengths)
from bert_tf.training.packed_rows import Packing, pack_batch, static_rows_dataset
from bert_tf.training.record_files import (COMPRESSION_TYPES, EXAMPLE_INDEX, InputError,
                                           as_written, detect_compression, expand_file_patterns,
                                           prefetched, read_input_metadata)
from bert_tf.training.remasking import DynamicMasking, apply_dynamic_masking


# === The dataset ===


def _parse_batch(serialized, spec, names):
  parsed = tf.io.parse_example(serialized, spec)
  out = {}
  for canonical, stored in names.items():
    value = parsed[stored]
    out[canonical] = tf.cast(value, tf.int32) if value.dtype == tf.int64 else value
  return out


class _PipelineShare(NamedTuple):
  """One input pipeline's part of a run: pipeline `index` of `count` feeds `replicas` replicas
  a batch of `per_replica_batch` each (from distribution.data_iterator's
  tf.distribute.InputContext)."""
  count: int
  index: int
  per_replica_batch: int
  replicas: int


def _pipeline_share(input_context: Optional[tf.distribute.InputContext],
                    batch_size: int) -> _PipelineShare:
  """This pipeline's share of the global batch_size; without an input context, one pipeline
  feeding one replica the batch as given."""
  if input_context is None:
    return _PipelineShare(1, 0, batch_size, 1)
  count = input_context.num_input_pipelines
  return _PipelineShare(count, input_context.input_pipeline_id,
                        input_context.get_per_replica_batch_size(batch_size),
                        max(1, input_context.num_replicas_in_sync // count))


def pretraining_dataset(input_files: Union[str, Sequence[str]], max_seq_length: int,
                        max_predictions_per_seq: int, batch_size: int, is_training: bool,
                        input_context: Optional[tf.distribute.InputContext] = None,
                        compression: Optional[str] = None,
                        use_v2_feature_names: Optional[bool] = None,
                        repeat: Optional[bool] = None, cycle_length: int = 8,
                        shuffle_buffer_size: int = 1000, seed: Optional[int] = None,
                        dynamic_masking: Optional[DynamicMasking] = None,
                        packing: Optional["Packing"] = None,
                        vocab_size: Optional[int] = None) -> tf.data.Dataset:
  """Batches of pretraining features for training or evaluation.

  Size: fifteen parameters, the pretraining flags that shape its data (files, lengths, batch,
  shuffle, length buckets, dynamic masking, packing, the model's vocab), passed by
  run_pretraining as they are.

  Training: files are sharded (see below), shuffled, repeated and interleaved `cycle_length`
  at a time; records are shuffled in a buffer of `shuffle_buffer_size`. Evaluation: files are
  read in order, once (unless `repeat`), without shuffling. Both drop the last partial batch.

  With a `tf.distribute.InputContext` (from `distribution.data_iterator`), the batch is the
  per-replica share of the global `batch_size`, and each input pipeline reads a disjoint part
  of the data. Training: whole files when there are at least as many files as pipelines,
  otherwise every n-th record (which reads all the data in every pipeline). Evaluation: each
  global batch is the one a single process reads (the next `batch_size` records in file
  order), each pipeline taking its slice of it, so an evaluation scores the same examples
  whatever the number of workers.

  Args:
    input_files: comma-separated paths/globs, or a list of them.
    max_seq_length, max_predictions_per_seq: the feature lengths of the records.
    batch_size: the global batch size (the per-replica size without an input_context).
    is_training: shuffle and repeat (see above).
    input_context: tf.distribute input context, or None for one pipeline and one replica.
    compression: "" or "GZIP"; None reads it from the metadata or the files' first bytes.
    use_v2_feature_names: whether the records store input_word_ids/input_type_ids; None reads
      it from the metadata (default False).
    repeat: repeat forever; None means `is_training`.
    cycle_length: files read concurrently when training.
    shuffle_buffer_size: records in the training shuffle buffer.
    seed: makes shuffling and interleaving deterministic.
    dynamic_masking: re-mask every batch (see DynamicMasking), or None to use the stored masks.
    packing: several instances per row (Packing), or None.
    vocab_size: the model's vocab_size: a batch holding a token id outside it fails, naming
      --input_file and the size (a GPU's embedding lookup would read zeros for it, silently);
      None: not checked.

  Returns:
    A dataset of dicts: the models' input names input_word_ids, input_mask, input_type_ids
    (the records' input_ids, input_mask, segment_ids; see record_schema.to_model_names), then
    masked_lm_positions, masked_lm_ids [B, L] or [B, P] int32, masked_lm_weights [B, P]
    float32, next_sentence_labels [B, 1] int32. Packed (exact: a batch's instances in the
    fewest rows of L; static: packing.rows rows of L): [R, L] rows, input_position_ids,
    packed_cls_positions [R, K], the masked_lm_* [R, P + K] (predictions_per_row), and
    next_sentence_labels [R * K, 1] with next_sentence_weights [R * K] (0 for an empty slot).
  """
  files = (expand_file_patterns(input_files) if isinstance(input_files, str)
           else expand_file_patterns(list(input_files)))
  compression, use_v2_feature_names = _pretraining_format(
      files, max_seq_length, max_predictions_per_seq, compression, use_v2_feature_names)
  share = _pipeline_share(input_context, batch_size)
  dataset, deterministic = _pretraining_records(
      files, compression, share, is_training, is_training if repeat is None else repeat,
      cycle_length, shuffle_buffer_size, seed)
  static = packing is not None and packing.static
  dataset = dataset.batch(
      (packing.window or 8 * share.per_replica_batch) if static else share.per_replica_batch,
      drop_remainder=True)
  dataset = _parsed_pretraining_batches(
      dataset, record_schema.parsing_spec(max_seq_length, max_predictions_per_seq,
                                          use_v2_feature_names),
      record_schema.feature_names(use_v2_feature_names), dynamic_masking, share, deterministic)
  if vocab_size is not None:
    dataset = dataset.map(as_written(_ids_checked(vocab_size, files)),
                          num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
  if packing is not None:
    dataset = _packed_pretraining_rows(dataset, packing, max_predictions_per_seq)
  return prefetched(dataset)


def _ids_checked(vocab_size: int, files: Sequence[str]):
  """A batch map that fails when a token id (input or masked-LM label) is outside
  [0, vocab_size)."""
  where = files[0] if len(files) == 1 else f"{files[0]} ... ({len(files)} files)"
  # No quote marks: TensorFlow escapes them in the error.
  message = (f"--input_file={where}: a record holds a token id outside [0, {vocab_size}), the "
             "vocab_size of --bert_config_file: the data was made with a larger vocab than the "
             "model; the largest id in the batch is")

  def check(batch):
    ids = tf.concat([tf.reshape(batch["input_word_ids"], [-1]),
                     tf.reshape(batch["masked_lm_ids"], [-1])], axis=0)
    inside = tf.reduce_all((ids >= 0) & (ids < vocab_size))
    with tf.control_dependencies([tf.debugging.Assert(inside, [message, tf.reduce_max(ids)])]):
      return {key: tf.identity(value) for key, value in batch.items()}
  return check


def _pretraining_format(files: Sequence[str], max_seq_length: int, max_predictions_per_seq: int,
                        compression: Optional[str], use_v2_feature_names: Optional[bool]
                        ) -> Tuple[str, bool]:
  """(compression, use_v2_feature_names) of pretraining record files: the values given, or
  else what the files' metadata records (checked against the two lengths) or, for the
  compression, what their first bytes show."""
  metadata = read_input_metadata(files)
  if metadata is not None:
    try:
      record_schema.check_metadata(metadata, source=record_schema.metadata_path(files[0]),
                                   max_seq_length=max_seq_length,
                                   max_predictions_per_seq=max_predictions_per_seq)
    except record_schema.MetadataError as e:
      raise InputError(str(e)) from None
  if compression is None:
    compression = detect_compression(files, metadata)
  if compression not in COMPRESSION_TYPES:
    raise InputError(f"compression must be one of {COMPRESSION_TYPES}, got {compression!r}")
  if use_v2_feature_names is None:
    use_v2_feature_names = bool(metadata and metadata.get("use_v2_feature_names"))
  return compression, use_v2_feature_names


def _pretraining_records(files: Sequence[str], compression: str, share: _PipelineShare,
                         is_training: bool, repeat: bool, cycle_length: int,
                         shuffle_buffer_size: int, seed: Optional[int]
                         ) -> Tuple[tf.data.Dataset, bool]:
  """This pipeline's serialized records, sharded, shuffled and interleaved as
  pretraining_dataset's docstring says, and whether the maps after it must keep their order."""
  shard_by_file = share.count > 1 and len(files) >= share.count and is_training
  shard_by_record = share.count > 1 and not shard_by_file and is_training
  shard_by_batch = share.count > 1 and not is_training
  if share.count > 1:
    how = ("by file" if shard_by_file else "by record" if shard_by_record
           else "each global batch")
    logging.info("Input pipeline %d of %d: sharding %s (%d files), per-replica batch %d",
                 share.index, share.count, how, len(files), share.per_replica_batch)

  # Record sharding needs every pipeline to see the records in the same order.
  deterministic = seed is not None or shard_by_record or not is_training
  dataset = tf.data.Dataset.from_tensor_slices(files)
  if shard_by_file:
    dataset = dataset.shard(share.count, share.index)
  num_files = -(-len(files) // share.count) if shard_by_file else len(files)
  # With record sharding the file order must be the same in every pipeline, so it is not
  # shuffled there; the record shuffle buffer below still mixes the records.
  if is_training and not shard_by_record:
    dataset = dataset.shuffle(num_files, seed=seed, reshuffle_each_iteration=True)
  if repeat:
    dataset = dataset.repeat()

  def read(path):
    return tf.data.TFRecordDataset(path, compression_type=compression)

  if is_training:
    dataset = dataset.interleave(as_written(read),
                                 cycle_length=max(1, min(cycle_length, num_files)),
                                 num_parallel_calls=tf.data.AUTOTUNE,
                                 deterministic=deterministic)
  else:
    dataset = dataset.flat_map(as_written(read))
  if shard_by_record:
    dataset = dataset.shard(share.count, share.index)
  if shard_by_batch:
    # Pipeline i's part of global batch k is the records this pipeline's replicas take at
    # step k: chunk k * count + i of the records in file order.
    chunk = share.per_replica_batch * share.replicas
    dataset = dataset.batch(chunk, drop_remainder=True).shard(share.count, share.index).unbatch()
  if is_training:
    dataset = dataset.shuffle(shuffle_buffer_size, seed=seed, reshuffle_each_iteration=True)
  return dataset, deterministic


def _parsed_pretraining_batches(batches: tf.data.Dataset, spec, names,
                                dynamic_masking: Optional[DynamicMasking],
                                share: _PipelineShare, deterministic: bool
                                ) -> tf.data.Dataset:
  """Batches of serialized records parsed, under the models' input names; with
  dynamic_masking re-masked, each batch from the masking seed and the batch's number (its
  position in this pipeline's stream times the pipelines, plus this pipeline's index: no two
  batches of a run share it)."""
  if dynamic_masking is None:
    return batches.map(
        as_written(lambda records: record_schema.to_model_names(
            _parse_batch(records, spec, names))),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
  parsed = batches.map(as_written(lambda records: _parse_batch(records, spec, names)),
                       num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
  return parsed.enumerate().map(
      as_written(lambda index, batch: record_schema.to_model_names(apply_dynamic_masking(
          batch, dynamic_masking,
          tf.stack([tf.constant(dynamic_masking.seed, tf.int64),
                    index * share.count + share.index])))),
      num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _packed_pretraining_rows(batches: tf.data.Dataset, packing: "Packing",
                             max_predictions_per_seq: int) -> tf.data.Dataset:
  """Parsed batches (static packing: windows) as packed rows with next_sentence_weights:
  static packing packs each window and takes its rows packing.rows at a time, exact packing
  packs each batch into the fewest rows."""
  extra = predictions_per_row(max_predictions_per_seq, packing.max_per_row)
  batches = batches.map(as_written(_with_next_sentence_weights),
                        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  if packing.static:
    return static_rows_dataset(batches, packing, MASKED_LM_KEYS, extra)
  return batches.map(
      as_written(lambda batch: pack_batch(
          batch, packing.max_per_row, prediction_keys=MASKED_LM_KEYS,
          predictions_per_row=extra)),
      num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


# Packed pretraining rows (pack_batch's prediction_keys).
MASKED_LM_KEYS = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
NEXT_SENTENCE_WEIGHTS = "next_sentence_weights"


def predictions_per_row(max_predictions_per_seq: int,
                        max_per_row: int = row_packing.MAX_EXAMPLES_PER_ROW) -> int:
  """Masked-LM slots of a packed pretraining row: max_predictions_per_seq plus one per
  possible instance (each instance rounds its 15% up to a whole prediction, at least one);
  rows are filled so that their instances' predictions fit (row_packing's costs)."""
  return max_predictions_per_seq + max_per_row


def _with_next_sentence_weights(batch):
  """Weight 1 for every instance's next-sentence label (empty packed slots get 0)."""
  out = dict(batch)
  out[NEXT_SENTENCE_WEIGHTS] = tf.ones_like(tf.reshape(batch["next_sentence_labels"], [-1]),
                                            tf.float32)
  return out


# === Fine-tuning records (each task's data module owns its record spec) ===


# A record spec, as a task's data module gives it (without TensorFlow): {feature name:
# (shape, dtype name)}, e.g. {"input_ids": ((128,), "int64"), "label_ids": ((), "float32")}.
# A shape whose first entry is None, e.g. (None, 9), is a per-position feature stored for the
# record's real positions only (n x 9 values for a record of n real positions): it is read as
# [B, L, 9], the positions past the record's end holding 0 (L: the records' input_mask length).
RecordSpec = Mapping[str, Tuple[Tuple[Optional[int], ...], str]]


def parsing_spec(spec: RecordSpec) -> Dict[str, Union[tf.io.FixedLenFeature,
                                                       tf.io.FixedLenSequenceFeature]]:
  """A task's record spec (its data module's `record_spec`) as tf.io parsing features (a
  feature of real positions only: a FixedLenSequenceFeature, padded by _parse_records)."""
  out = {}
  for name, (shape, dtype) in spec.items():
    if shape and shape[0] is None:
      out[name] = tf.io.FixedLenSequenceFeature(list(shape[1:]), tf.as_dtype(dtype),
                                                allow_missing=True, default_value=0)
    else:
      out[name] = tf.io.FixedLenFeature(list(shape), tf.as_dtype(dtype))
  return out


def _parse_records(serialized, spec):
  parsed = tf.io.parse_example(serialized, spec)
  length = spec["input_mask"].shape[-1]
  for name, feature in spec.items():
    if isinstance(feature, tf.io.FixedLenSequenceFeature):  # real positions -> [B, L, ...]
      value = parsed[name]
      paddings = [[0, 0], [0, length - tf.shape(value)[1]]] + [[0, 0]] * len(feature.shape)
      parsed[name] = tf.ensure_shape(tf.pad(value, paddings),
                                     [None, length] + list(feature.shape))
  return record_schema.to_model_names(
      {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in parsed.items()})


def eval_steps(num_examples: int, global_batch_size: int) -> int:
  """Batches that cover num_examples once when the last one is padded (at least one)."""
  return max(1, -(-num_examples // global_batch_size))


# Training batches per length-grouping window (group_by_length): examples are sorted by length
# within a window of this many batches of the shuffled stream (Hugging Face's group_by_length
# uses "megabatches" of 50 batches the same way).
# What a cut-off position of a per-position output holds when predictions are padded back to
# max_seq_length (loop.Trainer.predict_step): far below any real logit, so a padded position is
# never ranked among the best (SQuAD's n-best) and never read otherwise.
PADDED_LOGIT = -1e9


def _length_grouped(window: Mapping[str, tf.Tensor], index: tf.Tensor, batch_size: int,
                    batches_per_group: int, seed: Optional[int],
                    boundaries: Sequence[int]) -> tf.data.Dataset:
  """The window's examples sorted by length, cut into groups of batches_per_group consecutive
  batches of batch_size (one update's), the groups in a random order, then the batches one by
  one.

  The sort key is the example's length bucket (of `boundaries`), and the order within a bucket
  is random: a batch is cut to its bucket anyway, so sorting finer would save nothing and would
  put examples of one exact length together (the windows of one SQuAD paragraph, say) instead
  of a random sample of the bucket. Both random draws are seeded by seed and the window's
  index."""
  lengths = record_lengths(window["input_mask"])
  count = tf.shape(lengths)[0]
  if seed is None:
    seeds = tf.random.uniform([2, 2], maxval=tf.int64.max, dtype=tf.int64)
  else:
    seeds = tf.random.experimental.stateless_split(
        tf.stack([tf.constant(seed, tf.int64), tf.cast(index, tf.int64)]), num=2)
  bucket = tf.searchsorted(tf.constant(list(boundaries), tf.int32), lengths, side="left")
  # A uniform draw in [0, 1) added to each bucket's integer key: random order within a bucket.
  key = tf.cast(bucket, tf.float32) + tf.random.stateless_uniform([count], seeds[0])
  order = tf.argsort(key, stable=True)
  group = batch_size * batches_per_group
  num_groups = window["input_mask"].shape[0] // group
  permutation = tf.random.experimental.stateless_shuffle(tf.range(num_groups), seed=seeds[1])
  batches = {}
  for key, value in window.items():
    rest = tf.shape(value)[1:]
    groups = tf.reshape(tf.gather(value, order), tf.concat([[num_groups, group], rest], 0))
    batches[key] = tf.reshape(tf.gather(groups, permutation),
                              tf.concat([[num_groups * batches_per_group, batch_size], rest], 0))
  return tf.data.Dataset.from_tensor_slices(batches)


def record_dataset(input_file: str, spec: Dict[str, tf.io.FixedLenFeature], batch_size: int,
                   is_training: bool, input_context: Optional[tf.distribute.InputContext] = None,
                   num_examples: Optional[int] = None, seed: Optional[int] = None,
                   shuffle_buffer_size: int = 100,
                   length_buckets: Optional[Sequence[int]] = None,
                   group_by_length: bool = False, batches_per_update: int = 1,
                   packing: Optional[Packing] = None) -> tf.data.Dataset:
  """Batches of a fine-tuning record file of any fixed-length schema: the task's data module
  gives its record spec (classifier_data, squad_data, tagging_data: `record_spec`, through
  parsing_spec), and the fine-tuning driver reads every task's records here (int64 features
  become int32; the original's names become the models' input names).

  Size: twelve parameters, the tf.data options of a fine-tuning run's flags (batch, shuffle,
  length buckets, grouping, accumulation, packing) that the driver passes through.

  Training without group_by_length is the original's input_fn: repeat, shuffle in a buffer
  across the repeat (100 records, the original's value: data order is close to file order),
  batch, drop the last partial batch. With group_by_length the file is shuffled within each
  pass (so each epoch of the stream holds every example exactly once) in a buffer of at least
  GROUP_SHUFFLE_RECORDS records (the whole file, for most fine-tuning sets), and the stream
  read in windows of GROUP_WINDOW_BATCHES updates; each window's examples are ordered by length
  bucket (random order within a bucket; the 'auto' buckets when length_buckets is None), cut
  into updates (the global batch: this pipeline's replicas x batches_per_update
  micro-batches), and the updates shuffled (seeded by `seed` and the window's position), so
  the examples of an update do not depend on how it is split over replicas and micro-batches.
  An example moves only within its window, so an epoch's end is blurred by at most one window.
  Deterministic with a seed, so resume-by-skip is exact.

  Evaluation and prediction read every record once, in order, each with its position as
  `example_index`, and pad the data with all-zero records (weight 0: is_real_example 0,
  label_mask 0; example_index -1) up to a multiple of the global batch, so no example is dropped
  or counted twice, on any strategy: exactly eval_steps(num_examples, batch_size) batches per
  replica.

  With length_buckets each batch is cut to its longest real row rounded up to a boundary
  (cut_to_bucket); without, every batch has the records' static length. With packing
  (Packing; not with group_by_length), batches are packed rows (pack_batch):
  exact packing packs each batch of the unpacked run (training, eval and predict alike) into
  the fewest rows (a row_packing.row_ladder count), of the narrowest length bucket that needs
  no more rows than max_seq_length does (row_packing.best_width); static packing
  packs windows of the training stream into rows taken packing.rows at a time (one shape, no
  cut), and packs eval and predict batches as exact packing does.

  Args:
    input_file: a TFRecord file written by a task's data module.
    spec: its parsing features (parsing_spec of the module's record_spec).
    batch_size: the global batch size (the per-replica size without an input_context).
    is_training: training (see above) or eval/predict.
    input_context: from distribution.data_iterator (each input pipeline reads every n-th record;
      the batch is the per-replica share of `batch_size`), or None.
    num_examples: the number of records; required for eval/predict (the padding).
    seed: makes the training shuffle deterministic.
    shuffle_buffer_size: records in the training shuffle buffer.
    length_buckets: boundaries from bert_tf.length_buckets.parse, or None.
    group_by_length: group training batches by length.
    batches_per_update: micro-batches per update (gradient accumulation), for the grouping.
    packing: packed rows, or None.

  Returns:
    Dicts of the spec's features under the models' input names (input_word_ids, input_mask,
    input_type_ids [B, L] int32, L = the records' length or a boundary; the task's own, e.g.
    label_ids [B]), and for eval/predict example_index [B] int64. Packed: [R, L] rows,
    input_position_ids [R, L], packed_cls_positions [R, K], and the per-example features
    [R * K] in slot order.
  """
  if packing is not None and group_by_length:
    raise ValueError("packed rows are not grouped by length: give packing or group_by_length")
  share = _pipeline_share(input_context, batch_size)
  parse = lambda serialized: _parse_records(serialized, spec)
  cut_or_pack = _batch_shape(spec, length_buckets, packing)
  records = tf.data.TFRecordDataset(input_file)
  if not is_training:
    if num_examples is None:
      raise ValueError("num_examples is needed to pad the eval/predict data")
    dataset = _indexed_and_padded(records, parse, num_examples,
                                  eval_steps(num_examples, batch_size) * batch_size)
    if share.count > 1:
      dataset = dataset.shard(share.count, share.index)
    dataset = dataset.batch(share.per_replica_batch, drop_remainder=True)
    if cut_or_pack is not None:
      dataset = dataset.map(as_written(cut_or_pack), num_parallel_calls=tf.data.AUTOTUNE,
                            deterministic=True)
    return prefetched(dataset)
  if share.count > 1:
    records = records.shard(share.count, share.index)
  if group_by_length:
    # Grouped by the buckets batches are cut to; without a cut, by the 'auto' ladder's, so
    # that a fixed-length run sees the examples in the order of an 'auto' one.
    return prefetched(_length_grouped_batches(
        records, parse, share, batches_per_update, seed, shuffle_buffer_size,
        length_buckets or auto_buckets(spec["input_mask"].shape[-1]), cut_or_pack))
  records = records.repeat().shuffle(shuffle_buffer_size, seed=seed,
                                     reshuffle_each_iteration=True)
  if packing is not None and packing.static:
    windows = records.batch(packing.window or 8 * share.per_replica_batch, drop_remainder=True)
    windows = windows.map(as_written(parse), num_parallel_calls=tf.data.AUTOTUNE,
                          deterministic=True)
    return prefetched(static_rows_dataset(windows, packing))
  dataset = records.batch(share.per_replica_batch, drop_remainder=True)
  batch_of = parse if cut_or_pack is None else (
      lambda serialized: cut_or_pack(parse(serialized)))
  return prefetched(dataset.map(as_written(batch_of), num_parallel_calls=tf.data.AUTOTUNE,
                                 deterministic=True))


def _batch_shape(spec: Dict[str, tf.io.FixedLenFeature], length_buckets: Optional[Sequence[int]],
                 packing: Optional[Packing]):
  """What record_dataset does to each parsed batch (None: nothing): an example of several
  sequences (the spec's input_mask [sequences, L]) made rows of their own
  (bucketing.as_sequences), then packed (pack_batch) or cut to its bucket (cut_to_bucket).

  Static packing is refused for such examples: it packs a window of the stream and takes its rows
  in turn, which would part an example's sequences over steps."""
  if packing is not None:  # packed rows take their width from the buckets themselves
    cut_or_pack = lambda batch: pack_batch(batch, packing.max_per_row, widths=length_buckets)
  elif length_buckets is not None:
    cut_or_pack = lambda batch: cut_to_bucket(batch, length_buckets)
  else:
    cut_or_pack = None
  if len(spec["input_mask"].shape) < 2:
    return cut_or_pack
  if packing is not None and packing.static:
    raise ValueError("static packing would part an example's sequences over steps: use "
                     "--packing=exact or none for examples of several sequences")
  if cut_or_pack is None:
    return as_sequences
  return lambda batch: cut_or_pack(as_sequences(batch))


def _indexed_and_padded(records: tf.data.Dataset, parse, num_examples: int,
                        total: int) -> tf.data.Dataset:
  """Every record parsed, in file order, with its position as example_index, then all-zero
  examples (weight 0; example_index -1) up to `total`."""
  examples = records.batch(256).map(as_written(parse)).unbatch()
  examples = examples.enumerate().map(
      as_written(lambda i, example: dict(example, **{EXAMPLE_INDEX: i})))
  if total > num_examples:
    padding = {name: tf.zeros(spec.shape, spec.dtype)
               for name, spec in examples.element_spec.items()}
    padding[EXAMPLE_INDEX] = tf.constant(-1, tf.int64)
    examples = examples.concatenate(
        tf.data.Dataset.from_tensors(padding).repeat(total - num_examples))
  return examples


def _length_grouped_batches(records: tf.data.Dataset, parse, share: _PipelineShare,
                            batches_per_update: int, seed: Optional[int],
                            shuffle_buffer_size: int, boundaries: Sequence[int],
                            cut) -> tf.data.Dataset:
  """Training batches grouped by length, as record_dataset's docstring says, each cut by
  `cut` (or not, when it is None)."""
  # Shuffled within each pass over the file, so every epoch of the stream holds every example
  # exactly once (the original shuffles across the repeat).
  records = records.shuffle(max(shuffle_buffer_size, GROUP_SHUFFLE_RECORDS), seed=seed,
                            reshuffle_each_iteration=True).repeat()
  batches_per_group = share.replicas * batches_per_update
  windows = records.batch(share.per_replica_batch * batches_per_group * GROUP_WINDOW_BATCHES,
                          drop_remainder=True)
  windows = windows.map(as_written(parse), num_parallel_calls=tf.data.AUTOTUNE,
                        deterministic=True)
  batches = windows.enumerate().flat_map(
      as_written(lambda index, window: _length_grouped(
          window, index, share.per_replica_batch, batches_per_group, seed, boundaries)))
  if cut is None:
    return batches
  return batches.map(as_written(cut), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
