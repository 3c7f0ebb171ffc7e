"""Checking pretraining TFRecords: schema, internal consistency, summary figures, decoding.

The library half of data_prep/inspect_records.py.
"""

import collections
import gzip
import math
import struct
import sys
import zlib
from typing import Dict, List, Optional, Tuple

from bert_tf import io
from bert_tf import record_schema
from bert_tf.data import writer as writer_lib


def check_instance(d: Dict[str, List], max_seq_length: int,
                   vocab_size: Optional[int]) -> List[str]:
  """Internal consistency of one decoded instance (canonical names); returns the problems."""
  problems = []
  mask = d[record_schema.INPUT_MASK]
  n = sum(mask)
  if mask != [1] * n + [0] * (max_seq_length - n):
    problems.append("input_mask is not ones followed by zeros")
  ids = d[record_schema.INPUT_IDS]
  if any(ids[n:]):
    problems.append("input_ids are not zero-padded after the mask")
  if vocab_size is not None and any(not 0 <= i < vocab_size for i in ids):
    problems.append(f"input_ids outside [0, {vocab_size})")
  if vocab_size is not None and any(not 0 <= i < vocab_size
                                    for i in d[record_schema.MASKED_LM_IDS]):
    problems.append(f"masked_lm_ids outside [0, {vocab_size})")
  seg = d[record_schema.SEGMENT_IDS]
  a = seg[:n].count(0)
  if seg != [0] * a + [1] * (n - a) + [0] * (max_seq_length - n):
    problems.append("segment_ids are not 0...0 1...1 then padding")
  weights = d[record_schema.MASKED_LM_WEIGHTS]
  if not all(math.isfinite(w) for w in weights):
    return problems + ["masked_lm_weights are not all finite"]
  k = int(sum(weights))
  if weights != [1.0] * k + [0.0] * (len(weights) - k):
    problems.append("masked_lm_weights are not ones followed by zeros")
  positions = d[record_schema.MASKED_LM_POSITIONS][:k]
  if positions != sorted(set(positions)) or any(not 0 < p < n for p in positions):
    problems.append("masked_lm_positions are not distinct ascending positions inside the text")
  if any(d[record_schema.MASKED_LM_POSITIONS][k:]) or any(d[record_schema.MASKED_LM_IDS][k:]):
    problems.append("masked_lm_positions/ids are not zero-padded")
  if d[record_schema.NEXT_SENTENCE_LABELS][0] not in (0, 1):
    problems.append("next_sentence_labels is not 0 or 1")
  return problems


def describe(d: Dict[str, List], inv_vocab: Dict[int, str]) -> str:
  """The instance as text: masked positions shown as `shown{=original}`, segments split."""
  n = sum(d[record_schema.INPUT_MASK])
  k = int(sum(d[record_schema.MASKED_LM_WEIGHTS]))
  labels = dict(zip(d[record_schema.MASKED_LM_POSITIONS][:k], d[record_schema.MASKED_LM_IDS][:k]))
  words = []
  for i, token_id in enumerate(d[record_schema.INPUT_IDS][:n]):
    word = inv_vocab.get(token_id, f"<{token_id}>")
    if i in labels:
      word += "{=" + inv_vocab.get(labels[i], f"<{labels[i]}>") + "}"
    words.append(word)
  nsp = "random next" if d[record_schema.NEXT_SENTENCE_LABELS][0] else "actual next"
  return f"[{nsp}, {n} tokens, {k} masked] " + " ".join(words)


_GZIP_MAGIC = b"\x1f\x8b"


def _masked_crc(data: bytes) -> bytes:
  """TFRecord's masked CRC-32C of `data`, as the 4 little-endian bytes stored in the file."""
  crc = int(writer_lib.crc32c_many([data])[0])
  rotated = ((crc >> 15) | (crc << 17)) & 0xFFFFFFFF
  return struct.pack("<I", (rotated + 0xA282EAD8) & 0xFFFFFFFF)


def _starts_with_gzip_magic(path: str) -> bool:
  with io.open_file(path, "rb") as f:
    return f.read(2) == _GZIP_MAGIC


def detect_compression(path: str) -> str:
  """"GZIP" if the file starts with GZIP's magic bytes (1f 8b), else "" (training's rule)."""
  return "GZIP" if _starts_with_gzip_magic(path) else ""


def _header_problem(path: str, compression: str, offset: int, source: str) -> Optional[str]:
  """Why the record at `offset` (uncompressed) cannot be read, or None if its header is sound.

  Called after a read error: a bad length header makes the reader see a wrong length, and so
  report a truncated record or an allocation failure instead of the cause.
  """
  if compression == "GZIP" and not _starts_with_gzip_magic(path):
    return (f"the file is not GZIP-compressed but is read as GZIP (compression GZIP from "
            f"{source}); read it with --compression=''")
  raw = io.open_file(path, "rb")
  try:
    stream = gzip.GzipFile(fileobj=raw, mode="rb") if compression == "GZIP" else raw
    stream.seek(offset)
    head = stream.read(12)
  except (OSError, EOFError, zlib.error):  # a damaged GZIP stream: the reader's reason stands
    return None
  finally:
    raw.close()
  if len(head) < 12 or _masked_crc(head[:8]) == head[8:]:
    return None
  reason = "length checksum mismatch"  # the reader's words for a damaged length header
  if offset > 0:
    return reason
  if compression != "GZIP" and head[:2] == _GZIP_MAGIC:
    return (reason + f": the file is GZIP-compressed but is read uncompressed (compression '' "
            f"from {source}); read it with --compression=GZIP")
  return reason + ": not a TFRecord file (or its first record's header is damaged)"


def _read_error_message(error: Exception, path: str, compression: str, index: int,
                        offset: int, source: str) -> str:
  """The reader's error for record `index` at `offset`, with the length header's diagnosis."""
  message = str(error)
  prefix = f"{path}: record {index} at byte {offset}: "
  if not message.startswith(prefix):
    return message
  reason = message[len(prefix):]
  if "checksum mismatch" not in reason:
    reason = _header_problem(path, compression, offset, source) or reason or "unreadable record"
  return prefix + reason


def inspect_file(path: str, vocab_file: Optional[str] = None, num_examples: int = 3,
                 max_seq_length: Optional[int] = None,
                 max_predictions_per_seq: Optional[int] = None,
                 compression: Optional[str] = None, max_errors: int = 10,
                 out=None) -> int:
  """Checks and summarises one file, printing to `out`; returns the number of problems found.

  Size: one pass over a record file whose checks share its per-record state; split, each part would
  take that state as a dozen parameters.

  The problems are the invalid records (a read error counts as one and ends the reading: the
  records after it, and so the file's total, are unknown) and the file's other errors.

  Arguments left as None come from the metadata file, else from the first record; the
  compression, else from the file's first bytes (GZIP's magic 1f 8b), as training does. Other
  errors: a metadata file that training would refuse (invalid JSON, not pretraining metadata),
  a record count that contradicts the metadata's, a directory given as `path`. `out` defaults
  to the sys.stdout of the call.
  """
  out = sys.stdout if out is None else out
  if io.isdir(path):
    print(f"error: {path}: is a directory, not a record file (give the record files in it, "
          f"e.g. {io.join(path, '*.tfrecord')})", file=out)
    return 1
  errors = 0  # problems that are not invalid records: bad metadata, a count mismatch
  folder = path.rsplit("/", 1)[0] if "/" in path else "."
  journals = io.glob(io.join(folder, f"*{io.TEMP_MARKER}*{writer_lib.JOURNAL_SUFFIX}"))
  if journals:
    # Training refuses such a folder (record_files.check_no_unfinished_commit).
    print(f"error: {path}: {sorted(journals)[0]} is the journal of a create_pretraining_data "
          "run killed while committing: the folder may hold incomplete records or a mix of "
          "new and old ones; run that command again", file=out)
    errors += 1
  meta = None
  meta_path = record_schema.metadata_path(path)
  if io.exists(meta_path) or not io.is_local(path):
    try:
      meta = record_schema.read_metadata(meta_path)
    except record_schema.MetadataError as e:
      if io.exists(meta_path) or "not found" not in str(e):
        print(f"error: {e} (training refuses this file; fix or remove it)", file=out)
        errors += 1
  if meta is None and not errors:
    print(f"note: {path} has no metadata file ({meta_path}): lengths and names are taken from "
          "its first record, and training checks only its first record against its flags",
          file=out)
  if compression is not None:
    source = "--compression"
  elif meta and "compression" in meta:
    compression, source = meta["compression"] or "", "the metadata"
  else:
    compression, source = detect_compression(path), "the file's first bytes"
  seq_len = max_seq_length or (meta and meta["max_seq_length"]) or None
  max_preds = max_predictions_per_seq or (meta and meta["max_predictions_per_seq"]) or None
  v2 = bool(meta and meta["use_v2_feature_names"])
  vocab_size = meta.get("vocab_size") if meta else None
  vocab_file = vocab_file or (meta and meta.get("flags", {}).get("vocab_file"))
  inv_vocab = {}
  if vocab_file:
    try:
      with io.open_file(vocab_file, "rb") as f:
        inv_vocab = {i: line.decode("utf-8").strip() for i, line in enumerate(f)}
    except OSError as e:
      print(f"{path}: cannot read vocab {vocab_file} ({e}); showing ids", file=out)
  if vocab_size is None and inv_vocab:
    vocab_size = len(inv_vocab)  # no metadata: ids are checked against the vocab given

  stats = collections.Counter()
  examples = []
  invalid = 0
  read = 0  # records read so far
  offset = 0  # byte offset (in the uncompressed stream) of the next record
  stopped_at = None  # offset of the record the reader stopped at, if it did
  try:
    for index, record in enumerate(writer_lib.iter_records(path, compression)):
      read += 1
      offset += 16 + len(record)
      try:
        if seq_len is None:
          # No metadata: take the lengths and names from the first record.
          seq_len, max_preds, v2 = _lengths_from_record(record)
        d = record_schema.decode_example(record, seq_len, max_preds, v2)
        problems = check_instance(d, seq_len, vocab_size)
      except record_schema.SchemaError as e:
        problems = [str(e)]
      if problems:
        invalid += 1
        if invalid <= max_errors:
          print(f"{path}: record {index}: " + "; ".join(problems), file=out)
        continue
      n = sum(d[record_schema.INPUT_MASK])
      stats["instances"] += 1
      stats["tokens"] += n
      stats["full_length"] += n == seq_len
      stats["masked"] += int(sum(d[record_schema.MASKED_LM_WEIGHTS]))
      stats["random_next"] += d[record_schema.NEXT_SENTENCE_LABELS][0]
      if len(examples) < num_examples:
        examples.append(describe(d, inv_vocab))
  except writer_lib.CorruptRecordError as e:
    print("error: " + _read_error_message(e, path, compression, read, offset, source), file=out)
    invalid += 1
    stopped_at = offset

  count = max(stats["instances"], 1)
  print(f"{path}: {stats['instances']:,} valid records, {invalid} invalid; "
        f"max_seq_length={seq_len} max_predictions_per_seq={max_preds}"
        f"{' (v2 names)' if v2 else ''}{' GZIP' if compression else ''}", file=out)
  print(f"  mean length {stats['tokens'] / count:.1f}, full-length "
        f"{stats['full_length'] / count:.1%}, mean masked {stats['masked'] / count:.2f}, "
        f"random-next {stats['random_next'] / count:.1%}", file=out)
  if meta and "counts" in meta and "instances_in_file" in meta["counts"]:
    expected = meta["counts"]["instances_in_file"]
    if stopped_at is not None:
      # The reader stopped: the records after the error are unknown, so is the total.
      print(f"  metadata says {expected} records; {read} records before the error at byte "
            f"{stopped_at}, the rest of the file not read", file=out)
    elif expected != read:
      print(f"  metadata says {expected} records, the file holds {read}", file=out)
      errors += 1
  for text in examples:
    print("  " + text, file=out)
  return invalid + errors


def _lengths_from_record(record: bytes) -> Tuple[int, int, bool]:
  """(max_seq_length, max_predictions_per_seq, v2 names) of a record's features.

  Raises:
    record_schema.SchemaError: the record is not a tf.train.Example.
  """
  from tensorflow.core.example import example_pb2  # pylint: disable=g-import-not-at-top
  from google.protobuf import message  # pylint: disable=g-import-not-at-top

  try:
    first = example_pb2.Example.FromString(record).features.feature
  except message.DecodeError as e:
    raise record_schema.SchemaError(f"not a tf.train.Example: {e}") from None
  v2 = "input_word_ids" in first
  names = record_schema.feature_names(v2)
  return (len(first[names[record_schema.INPUT_IDS]].int64_list.value),
          len(first[names[record_schema.MASKED_LM_IDS]].int64_list.value), v2)
