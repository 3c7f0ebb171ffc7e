"""Pretraining TFRecords -> tf.data batches with static shapes, and dynamic masking.

Every batch has fixed shapes (drop_remainder=True) so that XLA and TPUs compile the training step
once. Features are the schema's canonical names (bert_tf.record_schema), whatever names the files
store, renamed once to the models' input names (input_word_ids, input_type_ids: TF Hub's), and
integer features are cast to int32 (TPUs have no int64 matmul/gather path).

Shape legend: B = per-replica batch, L = max_seq_length, P = max_predictions_per_seq.
"""

import concurrent.futures
import dataclasses
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from absl import logging
import tensorflow as tf

from bert_tf import io
from bert_tf import length_buckets
from bert_tf import logs
from bert_tf import record_schema
from bert_tf import row_packing
from bert_tf.length_buckets import auto_buckets

COMPRESSION_TYPES = ("", "GZIP")
_GZIP_MAGIC = b"\x1f\x8b"


class InputError(ValueError):
  """Input files that are missing, unreadable or inconsistent with the requested pipeline."""


# === The end of every pipeline ===


def _as_written(fn):
  """fn for a tf.data transformation, traced without AutoGraph: every branch on a tensor in
  this pipeline is tf.cond or tf.where already, and converting the functions (all they call
  included) takes longer than tracing them."""
  return tf.autograph.experimental.do_not_convert(fn)


def _prefetched(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """What ends every training, eval and predict pipeline: prefetching, with tf.data's
  autotuning model turned off.

  The model is off because deleting an iterator could block for up to a minute. Its thread
  (Model::OptimizeLoop, TensorFlow 2.20) sleeps between optimization rounds, up to 60 s apart
  once an iterator has run for a minute or two, and the iterator's destructor waits for that
  thread to end. The cancellation that should wake it can be missed: the callback wakes the
  thread before the cancellation manager reports itself cancelled, so the thread goes back
  to sleep for the rest of the period. Seen in the test suite (a stack taken with gdb: the
  main thread in ~IteratorResource, waiting for a thread in OptimizeLoop): a run_squad
  iterator's deletion, at a garbage collection in the next test, stalled it for 84 s.

  Without the model, a map's num_parallel_calls=AUTOTUNE runs as many calls as the machine has
  cores (what the autotuner raises it to when the step waits for data), and
  prefetch(AUTOTUNE) still fills its buffer while the step runs. A map of 10 ms calls ran at
  the same 5.4 ms an element either way on 2 cores, and the pretraining pipeline of the test
  records gave 1,150-1,900 batches of 32 a second either way, against about one a second
  that a BERT-Mini step takes there.
  """
  return autotuning_off(dataset.prefetch(tf.data.AUTOTUNE))


def autotuning_off(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """`dataset` with tf.data's autotuning model off (see _prefetched). Every pipeline that
  training, evaluation and prediction read runs so (distribution.data_iterator applies it to any
  dataset), and so do the short ones that check or count a file: reading a large file or
  thousands of shards lasts long enough for the model's sleep to grow to many seconds."""
  options = tf.data.Options()
  options.autotune.enabled = False
  return dataset.with_options(options)


# === Files and metadata ===


def expand_file_patterns(patterns: Union[str, Sequence[str]],
                         flag_name: str = "input_file") -> List[str]:
  """Expands comma-separated lists of paths and globs (any tf.io.gfile filesystem).

  Args:
    patterns: e.g. "data/part-*.tfrecord,extra.tfrecord", or a list of such strings.
    flag_name: the flag the patterns came from, named in errors.

  Returns:
    The matched files in the order of the patterns, each glob's matches sorted, duplicates and
    metadata files removed.

  Raises:
    InputError: a pattern matches no file, or no pattern was given.
  """
  if isinstance(patterns, str):
    patterns = [patterns]
  items = [p.strip() for spec in patterns for p in spec.split(",") if p.strip()]
  if not items:
    raise InputError(f"--{flag_name} is empty")
  files: List[str] = []
  for pattern in items:
    matches = [m for m in sorted(tf.io.gfile.glob(pattern))
               if not m.endswith(record_schema.METADATA_SUFFIX) and not tf.io.gfile.isdir(m)]
    if any(c in pattern for c in "*?["):
      # A glob over a folder also matches what is not data: a writer's temporaries
      # (<name>.incomplete-<pid>...) and run-directory locks.
      matches = [m for m in matches if io.TEMP_MARKER not in m.rsplit("/", 1)[-1]
                 and m.rsplit("/", 1)[-1] != io.LOCK_NAME]
    if not matches:
      raise InputError(f"--{flag_name}: no file matches {pattern!r}")
    files.extend(m for m in matches if m not in files)
  return files


# The journal data prep keeps while it renames its outputs into place (data/writer.py's
# JOURNAL_SUFFIX): while one exists, the folder may hold a mix of new and old records.
_COMMIT_JOURNAL_GLOB = f"*{io.TEMP_MARKER}*.commit"


def check_no_unfinished_commit(files: Sequence[str], flag_name: str) -> None:
  """Refuses input files whose folder holds data prep's commit journal.

  A create_pretraining_data run killed while renaming its outputs into place leaves the
  journal: the folder may then hold new records without metadata beside older ones. Running
  the same command again rolls the commit back (or finishes the data).

  Raises:
    InputError: naming the journal and the flag.
  """
  for folder in sorted({f.rsplit("/", 1)[0] if "/" in f else "." for f in files}):
    journals = sorted(tf.io.gfile.glob(io.join(folder, _COMMIT_JOURNAL_GLOB)))
    if journals:
      raise InputError(
          f"--{flag_name}: {journals[0]} is the journal of a create_pretraining_data run that "
          "was killed while committing its outputs, so the records in that folder may be "
          "incomplete or mixed with older ones; run the same create_pretraining_data command "
          "again (it rolls the commit back and remakes the data)")


def read_input_metadata(files: Sequence[str]) -> Optional[Dict[str, Any]]:
  """The metadata shared by `files` (read from `<file>.metadata.json`), or None if none has one.

  Raises:
    InputError: files disagree on sequence length, predictions, feature names or compression.
  """
  found = {}
  for path in files:
    meta_path = record_schema.metadata_path(path)
    if tf.io.gfile.exists(meta_path):
      found[path] = record_schema.read_metadata(meta_path)
  if not found:
    return None
  without = [path for path in files if path not in found]
  if without:
    logging.warning("%d input file(s) have no metadata file beside them (%s%s): their first "
                    "records are checked against the flags, the rest is trusted",
                    len(without), ", ".join(without[:3]), " ..." if len(without) > 3 else "")
  keys = ("max_seq_length", "max_predictions_per_seq", "use_v2_feature_names", "compression",
          "vocab_size", "do_lower_case")
  first_path, first = next(iter(found.items()))
  for path, meta in found.items():
    for key in keys:
      if meta.get(key) != first.get(key):
        raise InputError(f"{path} was made with {key}={meta.get(key)!r} but {first_path} with "
                         f"{key}={first.get(key)!r}; use files made with the same settings")
  return first


def check_input_metadata(files: Sequence[str], max_seq_length: int,
                         max_predictions_per_seq: int, vocab_size: Optional[int] = None,
                         do_lower_case: Optional[bool] = None) -> Optional[Dict[str, Any]]:
  """Checks the data's metadata against the training flags; returns it (None when absent).

  Raises:
    record_schema.MetadataError: a flag contradicts the data (the message names the flag).
    InputError: the files disagree with each other.
  """
  metadata = read_input_metadata(files)
  if metadata is not None:
    record_schema.check_metadata(metadata, source=record_schema.metadata_path(files[0]),
                                 max_seq_length=max_seq_length,
                                 max_predictions_per_seq=max_predictions_per_seq,
                                 vocab_size=vocab_size, do_lower_case=do_lower_case)
  return metadata


def detect_compression(files: Sequence[str], metadata: Optional[Mapping[str, Any]] = None) -> str:
  """"GZIP" or "" for `files`: from the metadata, else from the first bytes of each file.

  Raises:
    InputError: some files are compressed and others not.
  """
  if metadata is not None and "compression" in metadata:
    return metadata["compression"] or ""
  def kind(path):
    with tf.io.gfile.GFile(path, "rb") as f:
      return "GZIP" if f.read(2) == _GZIP_MAGIC else ""

  kinds = {}
  for path, found in zip(files, _map_files(kind, files)):
    kinds.setdefault(found, path)
  if len(kinds) > 1:
    raise InputError(f"{kinds['GZIP']} is GZIP-compressed but {kinds['']} is not; pass files "
                     "of one kind")
  return next(iter(kinds)) if kinds else ""


# Files opened at once by the start-up checks: on gs:// each open costs a round trip, and a
# run over thousands of shards checks every one of them on every worker.
_CHECK_THREADS = 16


def _map_files(fn, files: Sequence[str]) -> List[Any]:
  """[fn(path) for path in files], run by a few threads; the first failing file's error (in
  the files' order) is raised, so messages do not depend on timing."""
  if len(files) <= 1:
    return [fn(path) for path in files]
  with concurrent.futures.ThreadPoolExecutor(min(_CHECK_THREADS, len(files))) as pool:
    return list(pool.map(fn, files))


def _inspect_hint(path: str) -> str:
  return f"check it with: python data_prep/inspect_records.py {path}"


_TOKEN_ID_FEATURES = ("input_ids", "masked_lm_ids")


def check_record_files(files: Sequence[str], compression: str, flag_name: str,
                       lengths: Optional[Mapping[str, int]] = None,
                       vocab_size: Optional[int] = None) -> None:
  """Reads the first record of every file before training starts.

  An input pipeline that repeats files holding no record never yields a batch (it spins
  forever), so an empty file is refused here, on every worker, as is a file whose first
  record cannot be read. With `lengths` the first record's features are checked too, which
  catches data made with other lengths when it has no metadata to say so.

  Args:
    files: the record files.
    compression: "" or "GZIP".
    flag_name: the flag the files came from, named in errors.
    lengths: stored feature name -> expected number of values (None: no feature check). The
      v1 and v2 names of a feature are both accepted.
    vocab_size: with lengths, the token ids of the first record (input_ids, masked_lm_ids)
      must be below it: data made with a larger vocab than the model's config.

  Raises:
    InputError: naming the file, the flag and what is wrong.
  """
  aliases = {}
  for v1, v2 in zip(record_schema.feature_names(False).values(),
                    record_schema.feature_names(True).values()):
    aliases[v1], aliases[v2] = v2, v1

  try:
    # One pipeline reads every file's first record (a dataset per file would add a dataset's
    # start-up cost per shard, which thousands of shards turn into minutes).
    firsts = autotuning_off(tf.data.Dataset.from_tensor_slices(list(files)).interleave(
        _as_written(lambda path: tf.data.TFRecordDataset(
            path, compression_type=compression or None).take(1).map(
                _as_written(lambda record: (path, record)))),
        cycle_length=_CHECK_THREADS, num_parallel_calls=_CHECK_THREADS, deterministic=True))
    found = {path.numpy().decode("utf-8"): record.numpy() for path, record in firsts}
  except tf.errors.OpError:
    found = None  # some file cannot be read: the checks below, file by file, name it

  def check(path):
    try:
      if found is not None:
        first = [found[path]] if path in found else []
      else:
        first = [r.numpy() for r in autotuning_off(tf.data.TFRecordDataset(
            path, compression_type=compression or None).take(1))]
    except tf.errors.OpError as e:
      reason = _reason(e)
      raise InputError(f"--{flag_name}: {path} cannot be read as a "
                       f"{'GZIP ' if compression else ''}TFRecord file ({reason}); "
                       f"{_inspect_hint(path)}") from None
    if not first:
      raise InputError(f"--{flag_name}: {path} holds no records (an empty shard, as written "
                       "when --num_output_shards exceeds the instances); remove it from the "
                       "input or make the data again")
    if not lengths:
      return
    try:
      example = tf.train.Example.FromString(first[0])
    except Exception as e:  # pylint: disable=broad-except  (protobuf's DecodeError)
      raise InputError(f"--{flag_name}: {path}: the first record is not a tf.train.Example "
                       f"({e}); {_inspect_hint(path)}") from None
    stored = example.features.feature
    for name, length in lengths.items():
      key = name if name in stored else aliases.get(name)
      if key not in stored:
        raise InputError(f"--{flag_name}: {path}: the first record has no {name!r} feature "
                         f"(it has {', '.join(sorted(stored))}); is it pretraining data?")
      feature = stored[key]
      count = len(feature.int64_list.value) + len(feature.float_list.value)
      if count != length:
        raise InputError(
            f"--{flag_name}: {path}: the first record's {key} has {count} values but the flags "
            f"ask for {length} (--max_seq_length / --max_predictions_per_seq must be the "
            "values the data was made with)")
      if vocab_size and name in _TOKEN_ID_FEATURES and feature.int64_list.value:
        largest = max(feature.int64_list.value)
        if largest >= vocab_size:
          raise InputError(
              f"--{flag_name}: {path}: the first record's {key} holds token id {largest}, but "
              f"the model's vocab_size is {vocab_size} (--bert_config_file): the data was made "
              "with another, larger vocab")

  if found is not None:
    for path in files:
      check(path)
  else:
    _map_files(check, files)


def first_unreadable_file(files: Sequence[str], compression: str) -> Optional[Tuple[str, str]]:
  """(file, reason) of the first file that cannot be read to its end, or None.

  Reads every record: meant for naming the culprit after training hit a DataLossError.
  """
  for path in files:
    try:
      for _ in autotuning_off(tf.data.TFRecordDataset(path,
                                                      compression_type=compression or None)):
        pass
    except tf.errors.OpError as e:
      return path, _reason(e)
  return None


def _reason(error: "tf.errors.OpError") -> str:
  """The first line of a TensorFlow error's message without TensorFlow's wrapping (e.g.
  "truncated record at 999810' failed with Read less bytes than requested")."""
  text = (error.message or "").strip().splitlines()
  return logs.without_tf_wrapping(text[0]) if text else type(error).__name__


# === Dynamic masking ===


@dataclasses.dataclass(frozen=True)
class DynamicMasking:
  """Re-masks every batch on the fly (RoBERTa-style) with the original's masking rules.

  Attributes:
    vocab_size: random replacements are drawn uniformly from [0, vocab_size), special tokens
      included, as in the original.
    mask_id, cls_id, sep_id, pad_id: ids of [MASK], [CLS], [SEP], [PAD].
    masked_lm_prob: fraction of the tokens (counting [CLS] and [SEP]) to predict.
    seed: masks are a deterministic function of (seed, batch index, input pipeline).
  """
  vocab_size: int
  mask_id: int
  cls_id: int
  sep_id: int
  pad_id: int = 0
  masked_lm_prob: float = 0.15
  seed: int = 12345

  @classmethod
  def from_vocab(cls, vocab: Mapping[str, int], **kwargs) -> "DynamicMasking":
    """Takes the special token ids from a token -> id vocab (tokenization.load_vocab)."""
    try:
      ids = {name: vocab[token] for name, token in (
          ("mask_id", "[MASK]"), ("cls_id", "[CLS]"), ("sep_id", "[SEP]"), ("pad_id", "[PAD]"))}
    except KeyError as e:
      raise InputError(f"dynamic masking needs the token {e.args[0]} in the vocab") from None
    return cls(vocab_size=len(vocab), **ids, **kwargs)


def _restore_original_ids(input_ids, positions, ids, weights):
  """Undoes the masking stored in the record: puts masked_lm_ids back at their positions."""
  # [B, P, L] one-hot of the real prediction slots (padding slots have weight 0).
  seq_length = tf.shape(input_ids)[1]
  slots = tf.one_hot(positions, seq_length, dtype=tf.int32) * tf.cast(
      weights > 0, tf.int32)[:, :, None]
  is_masked = tf.reduce_sum(slots, axis=1) > 0  # [B, L]
  stored = tf.reduce_sum(slots * ids[:, :, None], axis=1)  # [B, L]
  return tf.where(is_masked, stored, input_ids)


def apply_dynamic_masking(batch: Mapping[str, tf.Tensor], config: DynamicMasking,
                          seed: tf.Tensor) -> Dict[str, tf.Tensor]:
  """Draws new masked-LM predictions for a parsed batch (int32 features, static shapes).

  For each example: num_to_predict = min(P, max(1, round(num_tokens * masked_lm_prob))), taken
  uniformly among the real tokens other than [CLS], [SEP] and [PAD]; each chosen token becomes
  [MASK] with probability 0.8, stays itself with 0.1, and becomes a uniformly random id with
  0.1. Positions are sorted; unused slots are zero with weight 0.

  Args:
    batch: canonical name -> tensor, as produced by the pipeline before masking.
    config: the masking settings.
    seed: int64 [2] seed for tf.random.stateless_* (different per batch).

  Returns:
    A copy of `batch` with input_ids and the masked_lm_* features replaced.
  """
  input_ids = batch[record_schema.INPUT_IDS]  # [B, L]
  input_mask = batch[record_schema.INPUT_MASK]
  positions = batch[record_schema.MASKED_LM_POSITIONS]  # [B, P]
  num_slots = positions.shape[1]
  seq_length = input_ids.shape[1]
  original = _restore_original_ids(input_ids, positions, batch[record_schema.MASKED_LM_IDS],
                                   batch[record_schema.MASKED_LM_WEIGHTS])

  seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=4)
  shape = tf.shape(input_ids)
  is_candidate = ((input_mask > 0) & (original != config.cls_id) & (original != config.sep_id)
                  & (original != config.pad_id))
  # tf.round rounds half to even, like Python 3's round() in the original.
  num_tokens = tf.cast(tf.reduce_sum(input_mask, axis=1), tf.float32)
  num_to_predict = tf.minimum(
      num_slots, tf.maximum(1, tf.cast(tf.round(num_tokens * config.masked_lm_prob), tf.int32)))
  num_to_predict = tf.minimum(num_to_predict,
                              tf.reduce_sum(tf.cast(is_candidate, tf.int32), axis=1))  # [B]

  # A uniform random key per candidate, -1 for the rest: the top P keys are a uniform sample of
  # the candidates, of which the first num_to_predict are kept.
  keys = tf.where(is_candidate, tf.random.stateless_uniform(shape, seeds[0]), -1.0)
  _, chosen = tf.math.top_k(keys, k=num_slots, sorted=True)  # [B, P]
  keep = tf.range(num_slots)[None, :] < num_to_predict[:, None]  # [B, P]
  # Sort the kept positions; unused slots sort last (as seq_length) and then become 0.
  new_positions = tf.sort(tf.where(keep, chosen, seq_length), axis=1)
  weights = tf.cast(new_positions < seq_length, tf.float32)
  new_positions = tf.where(weights > 0, new_positions, 0)
  labels = tf.where(weights > 0, tf.gather(original, new_positions, batch_dims=1), 0)

  # 80% [MASK], 10% unchanged, 10% random id, decided per chosen token.
  slot_shape = tf.shape(new_positions)
  u_mask = tf.random.stateless_uniform(slot_shape, seeds[1])
  u_keep = tf.random.stateless_uniform(slot_shape, seeds[2])
  random_ids = tf.random.stateless_uniform(slot_shape, seeds[3], minval=0,
                                           maxval=config.vocab_size, dtype=tf.int32)
  replacement = tf.where(u_mask < 0.8, config.mask_id, tf.where(u_keep < 0.5, labels, random_ids))
  # Scatter the replacements into the sequence through a one-hot [B, P, L] (slots are distinct).
  slot_one_hot = tf.one_hot(new_positions, seq_length, dtype=tf.int32) * tf.cast(
      weights, tf.int32)[:, :, None]
  is_replaced = tf.reduce_sum(slot_one_hot, axis=1) > 0
  replaced_ids = tf.where(is_replaced,
                          tf.reduce_sum(slot_one_hot * replacement[:, :, None], axis=1), original)

  out = dict(batch)
  out[record_schema.INPUT_IDS] = replaced_ids
  out[record_schema.MASKED_LM_POSITIONS] = new_positions
  out[record_schema.MASKED_LM_IDS] = labels
  out[record_schema.MASKED_LM_WEIGHTS] = weights
  return out


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
  a batch of `per_replica_batch` each (from distribution.data_iterator's tf.distribute.InputContext)."""
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
                        packing: Optional["Packing"] = None) -> tf.data.Dataset:
  """Batches of pretraining features for training or evaluation.

  Size: fourteen parameters, the pretraining flags that shape its data (files, lengths, batch,
  shuffle, length buckets, dynamic masking, packing), passed by run_pretraining as they are.

  Training: files are sharded (see below), shuffled, repeated and interleaved `cycle_length`
  at a time; records are shuffled in a buffer of `shuffle_buffer_size`. Evaluation: files are
  read in order, once (unless `repeat`), without shuffling. Both drop the last partial batch.

  With a `tf.distribute.InputContext` (from `distribution.data_iterator`), the batch is the
  per-replica share of the global `batch_size`, and each input pipeline reads a disjoint part
  of the data: whole files when there are at least as many files as pipelines, otherwise every
  n-th record (which reads all the data in every pipeline).

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
  static = packing is not None and packing.mode == row_packing.STATIC
  dataset = dataset.batch(
      (packing.window or 8 * share.per_replica_batch) if static else share.per_replica_batch,
      drop_remainder=True)
  dataset = _parsed_pretraining_batches(
      dataset, record_schema.parsing_spec(max_seq_length, max_predictions_per_seq,
                                          use_v2_feature_names),
      record_schema.feature_names(use_v2_feature_names), dynamic_masking, share, deterministic)
  if packing is not None:
    dataset = _packed_pretraining_rows(dataset, packing, max_predictions_per_seq)
  return _prefetched(dataset)


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
  shard_by_file = share.count > 1 and len(files) >= share.count
  shard_by_record = share.count > 1 and not shard_by_file
  if share.count > 1:
    logging.info("Input pipeline %d of %d: sharding %s (%d files), per-replica batch %d",
                 share.index, share.count, "by file" if shard_by_file else "by record",
                 len(files), share.per_replica_batch)

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
    dataset = dataset.interleave(_as_written(read),
                                 cycle_length=max(1, min(cycle_length, num_files)),
                                 num_parallel_calls=tf.data.AUTOTUNE,
                                 deterministic=deterministic)
  else:
    dataset = dataset.flat_map(_as_written(read))
  if shard_by_record:
    dataset = dataset.shard(share.count, share.index)
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
        _as_written(lambda records: record_schema.to_model_names(
            _parse_batch(records, spec, names))),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
  parsed = batches.map(_as_written(lambda records: _parse_batch(records, spec, names)),
                       num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
  return parsed.enumerate().map(
      _as_written(lambda index, batch: record_schema.to_model_names(apply_dynamic_masking(
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
  batches = batches.map(_as_written(_with_next_sentence_weights),
                        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  if packing.mode == row_packing.STATIC:
    return static_rows_dataset(batches, packing, MASKED_LM_KEYS, extra)
  return batches.map(
      _as_written(lambda batch: pack_batch(
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


# === Fine-tuning records (each task's data module owns its record spec) ===

EXAMPLE_INDEX = "example_index"

# A record spec, as a task's data module gives it (without TensorFlow): {feature name:
# (shape, dtype name)}, e.g. {"input_ids": ((128,), "int64"), "label_ids": ((), "float32")}.
RecordSpec = Mapping[str, Tuple[Tuple[int, ...], str]]


def parsing_spec(spec: RecordSpec) -> Dict[str, tf.io.FixedLenFeature]:
  """A task's record spec (its data module's `record_spec`) as tf.io parsing features."""
  return {name: tf.io.FixedLenFeature(list(shape), tf.as_dtype(dtype))
          for name, (shape, dtype) in spec.items()}


def _parse_records(serialized, spec):
  parsed = tf.io.parse_example(serialized, spec)
  return record_schema.to_model_names(
      {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in parsed.items()})


def eval_steps(num_examples: int, global_batch_size: int) -> int:
  """Batches that cover num_examples once when the last one is padded (at least one)."""
  return max(1, -(-num_examples // global_batch_size))


# Training batches per length-grouping window (group_by_length): examples are sorted by length
# within a window of this many batches of the shuffled stream (Hugging Face's group_by_length
# uses "megabatches" of 50 batches the same way).
GROUP_WINDOW_BATCHES = 50
# Records in the shuffle buffer before grouping: the whole file for any fine-tuning set up to
# this size (SQuAD v1.1's 88k windows hold about 0.3 GB here), a wide sample of a bigger one.
# Sorting a window of a nearly file-ordered stream (the original's buffer of 100) would put
# the windows of one paragraph, or the lines of one source, in one batch: Hugging Face's
# group_by_length likewise draws its mega-batches from a random permutation of the whole set.
GROUP_SHUFFLE_RECORDS = 1 << 17
# What a cut-off position of a per-position output holds when predictions are padded back to
# max_seq_length (loop.Trainer.predict_step): far below any real logit, so a padded position is
# never ranked among the best (SQuAD's n-best) and never read otherwise.
PADDED_LOGIT = -1e9


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
      _as_written(lambda serialized: tf.math.bincount(
          real_length(tf.io.parse_example(serialized, spec)["input_mask"]),
          minlength=max_seq_length + 1, maxlength=max_seq_length + 1, dtype=tf.int64)),
      num_parallel_calls=tf.data.AUTOTUNE)
  counts = autotuning_off(counts_per_batch).reduce(
      tf.zeros([max_seq_length + 1], tf.int64), _as_written(lambda total, c: total + c))
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


# === Packed rows (--packing; bert_tf.row_packing) ===


def _split_features(batch: Mapping[str, tf.Tensor], mask_key: str = "input_mask"):
  """(per-position keys, per-example keys) of a batch: a per-position feature has
  batch[mask_key]'s [B, L] shape."""
  length = batch[mask_key].shape[-1]
  tokens = [k for k, v in batch.items() if v.shape.rank == 2 and v.shape[1] == length]
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
      value.set_shape([rows or None, max_per_row if key == row_packing.CLS_POSITIONS
                       else length if rows or len(choices) == 1 else None])
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

  dataset = parsed_windows.flat_map(_as_written(window_rows))
  dataset = dataset.batch(packing.rows, drop_remainder=True)
  return dataset.map(_as_written(lambda rows: _examples_of(rows, per_example)),
                     num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


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
  lengths = real_length(window["input_mask"])
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
  if packing is not None:  # packed rows take their width from the buckets themselves
    cut_or_pack = lambda batch: pack_batch(batch, packing.max_per_row, widths=length_buckets)
  elif length_buckets is not None:
    cut_or_pack = lambda batch: cut_to_bucket(batch, length_buckets)
  else:
    cut_or_pack = None
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
      dataset = dataset.map(_as_written(cut_or_pack), num_parallel_calls=tf.data.AUTOTUNE,
                            deterministic=True)
    return _prefetched(dataset)
  if share.count > 1:
    records = records.shard(share.count, share.index)
  if group_by_length:
    # Grouped by the buckets batches are cut to; without a cut, by the 'auto' ladder's, so
    # that a fixed-length run sees the examples in the order of an 'auto' one.
    return _prefetched(_length_grouped_batches(
        records, parse, share, batches_per_update, seed, shuffle_buffer_size,
        length_buckets or auto_buckets(spec["input_mask"].shape[0]), cut_or_pack))
  records = records.repeat().shuffle(shuffle_buffer_size, seed=seed,
                                     reshuffle_each_iteration=True)
  if packing is not None and packing.mode == row_packing.STATIC:
    windows = records.batch(packing.window or 8 * share.per_replica_batch, drop_remainder=True)
    windows = windows.map(_as_written(parse), num_parallel_calls=tf.data.AUTOTUNE,
                          deterministic=True)
    return _prefetched(static_rows_dataset(windows, packing))
  dataset = records.batch(share.per_replica_batch, drop_remainder=True)
  batch_of = parse if cut_or_pack is None else (
      lambda serialized: cut_or_pack(parse(serialized)))
  return _prefetched(dataset.map(_as_written(batch_of), num_parallel_calls=tf.data.AUTOTUNE,
                                 deterministic=True))


def _indexed_and_padded(records: tf.data.Dataset, parse, num_examples: int,
                        total: int) -> tf.data.Dataset:
  """Every record parsed, in file order, with its position as example_index, then all-zero
  examples (weight 0; example_index -1) up to `total`."""
  examples = records.batch(256).map(_as_written(parse)).unbatch()
  examples = examples.enumerate().map(
      _as_written(lambda i, example: dict(example, **{EXAMPLE_INDEX: i})))
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
  windows = windows.map(_as_written(parse), num_parallel_calls=tf.data.AUTOTUNE,
                        deterministic=True)
  batches = windows.enumerate().flat_map(
      _as_written(lambda index, window: _length_grouped(
          window, index, share.per_replica_batch, batches_per_group, seed, boundaries)))
  if cut is None:
    return batches
  return batches.map(_as_written(cut), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
