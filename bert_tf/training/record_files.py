"""Reading TFRecord files: the file patterns, the metadata written beside them, their
compression, the checks that name a missing, unfinished or unreadable file, and the end every
tf.data pipeline of the package shares (traced as written, prefetched, autotuning off)."""

import concurrent.futures
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from absl import logging
import tensorflow as tf

from bert_tf import io
from bert_tf import logs
from bert_tf import record_schema

COMPRESSION_TYPES = ("", "GZIP")
_GZIP_MAGIC = b"\x1f\x8b"


# The feature a fine-tuning dataset adds to each example: its index in the file (-1 for the
# dummy examples that fill the last batch, and for empty slots of packed rows).
EXAMPLE_INDEX = "example_index"


class InputError(ValueError):
  """Input files that are missing, unreadable or inconsistent with the requested pipeline."""


# === The end of every pipeline ===


def as_written(fn):
  """fn for a tf.data transformation, traced without AutoGraph: every branch on a tensor in
  this pipeline is tf.cond or tf.where already, and converting the functions (all they call
  included) takes longer than tracing them."""
  return tf.autograph.experimental.do_not_convert(fn)


def prefetched(dataset: tf.data.Dataset) -> tf.data.Dataset:
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
  """`dataset` with tf.data's autotuning model off (see prefetched). Every pipeline that
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
        as_written(lambda path: tf.data.TFRecordDataset(
            path, compression_type=compression or None).take(1).map(
                as_written(lambda record: (path, record)))),
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
