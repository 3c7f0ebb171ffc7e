"""Validates pretraining TFRecords, prints their summary figures and decodes a few instances.

  python data_prep/inspect_records.py out.tfrecord [more.tfrecord ...] [--num_examples=3]

Lengths, feature names and compression come from each file's metadata (`<file>.metadata.json`)
when it exists, otherwise from the first record (or the flags). Every record is checked
against the schema and for internal consistency; a corrupt or truncated record is reported with
its file, index and byte offset. Exit status: 0 if every record is valid, 1 otherwise.
"""

import collections
import os
import sys
from typing import Dict, List, Optional

from absl import app
from absl import flags

if __package__ in (None, ""):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_tf import features  # pylint: disable=g-import-not-at-top
from data_prep import writer as writer_lib  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS

def check_instance(d: Dict[str, List], max_seq_length: int,
                   vocab_size: Optional[int]) -> List[str]:
  """Internal consistency of one decoded instance (canonical names); returns the problems."""
  problems = []
  mask = d[features.INPUT_MASK]
  n = sum(mask)
  if mask != [1] * n + [0] * (max_seq_length - n):
    problems.append("input_mask is not ones followed by zeros")
  ids = d[features.INPUT_IDS]
  if any(ids[n:]):
    problems.append("input_ids are not zero-padded after the mask")
  if vocab_size is not None and any(not 0 <= i < vocab_size for i in ids):
    problems.append(f"input_ids outside [0, {vocab_size})")
  seg = d[features.SEGMENT_IDS]
  a = seg[:n].count(0)
  if seg != [0] * a + [1] * (n - a) + [0] * (max_seq_length - n):
    problems.append("segment_ids are not 0...0 1...1 then padding")
  weights = d[features.MASKED_LM_WEIGHTS]
  k = int(sum(weights))
  if weights != [1.0] * k + [0.0] * (len(weights) - k):
    problems.append("masked_lm_weights are not ones followed by zeros")
  positions = d[features.MASKED_LM_POSITIONS][:k]
  if positions != sorted(set(positions)) or any(not 0 < p < n for p in positions):
    problems.append("masked_lm_positions are not distinct ascending positions inside the text")
  if any(d[features.MASKED_LM_POSITIONS][k:]) or any(d[features.MASKED_LM_IDS][k:]):
    problems.append("masked_lm_positions/ids are not zero-padded")
  if d[features.NEXT_SENTENCE_LABELS][0] not in (0, 1):
    problems.append("next_sentence_labels is not 0 or 1")
  return problems


def describe(d: Dict[str, List], inv_vocab: Dict[int, str]) -> str:
  """The instance as text: masked positions shown as `shown{=original}`, segments split."""
  n = sum(d[features.INPUT_MASK])
  k = int(sum(d[features.MASKED_LM_WEIGHTS]))
  labels = dict(zip(d[features.MASKED_LM_POSITIONS][:k], d[features.MASKED_LM_IDS][:k]))
  words = []
  for i, token_id in enumerate(d[features.INPUT_IDS][:n]):
    word = inv_vocab.get(token_id, f"<{token_id}>")
    if i in labels:
      word += "{=" + inv_vocab.get(labels[i], f"<{labels[i]}>") + "}"
    words.append(word)
  nsp = "random next" if d[features.NEXT_SENTENCE_LABELS][0] else "actual next"
  return f"[{nsp}, {n} tokens, {k} masked] " + " ".join(words)


def inspect_file(path: str, vocab_file: Optional[str] = None, num_examples: int = 3,
                 max_seq_length: Optional[int] = None,
                 max_predictions_per_seq: Optional[int] = None,
                 compression: Optional[str] = None, max_errors: int = 10,
                 out=sys.stdout) -> int:
  """Checks and summarises one file, printing to `out`; returns the number of invalid records.

  Arguments left as None come from the metadata file, else from the first record.
  """
  meta = None
  meta_path = features.metadata_path(path)
  if os.path.exists(meta_path) or not features.is_local_path(path):
    try:
      meta = features.read_metadata(meta_path)
    except features.MetadataError as e:
      if os.path.exists(meta_path) or "not found" not in str(e):
        print(f"{path}: warning: {e}", file=out)
  if compression is None:
    compression = meta.get("compression", "") if meta else ""
  seq_len = max_seq_length or (meta and meta["max_seq_length"]) or None
  max_preds = max_predictions_per_seq or (meta and meta["max_predictions_per_seq"]) or None
  v2 = bool(meta and meta["use_v2_feature_names"])
  vocab_size = meta.get("vocab_size") if meta else None
  vocab_file = vocab_file or (meta and meta.get("flags", {}).get("vocab_file"))
  inv_vocab = {}
  if vocab_file:
    try:
      with features.open_file(vocab_file, "rb") as f:
        inv_vocab = {i: line.decode("utf-8").strip() for i, line in enumerate(f)}
    except OSError as e:
      print(f"{path}: cannot read vocab {vocab_file} ({e}); showing ids", file=out)

  stats = collections.Counter()
  examples = []
  invalid = 0
  try:
    for index, record in enumerate(writer_lib.iter_records(path, compression)):
      if seq_len is None:
        # No metadata: take the lengths and names from the first record.
        from tensorflow.core.example import example_pb2  # pylint: disable=g-import-not-at-top
        first = example_pb2.Example.FromString(record).features.feature
        v2 = "input_word_ids" in first
        names = features.feature_names(v2)
        seq_len = len(first[names[features.INPUT_IDS]].int64_list.value)
        max_preds = len(first[names[features.MASKED_LM_IDS]].int64_list.value)
      try:
        d = features.decode_example(record, seq_len, max_preds, v2)
        problems = check_instance(d, seq_len, vocab_size)
      except features.SchemaError as e:
        problems = [str(e)]
      if problems:
        invalid += 1
        if invalid <= max_errors:
          print(f"{path}: record {index}: " + "; ".join(problems), file=out)
        continue
      n = sum(d[features.INPUT_MASK])
      stats["instances"] += 1
      stats["tokens"] += n
      stats["full_length"] += n == seq_len
      stats["masked"] += int(sum(d[features.MASKED_LM_WEIGHTS]))
      stats["random_next"] += d[features.NEXT_SENTENCE_LABELS][0]
      if len(examples) < num_examples:
        examples.append(describe(d, inv_vocab))
  except writer_lib.CorruptRecordError as e:
    print(f"error: {e}", file=out)
    invalid += 1

  count = max(stats["instances"], 1)
  print(f"{path}: {stats['instances']:,} valid records, {invalid} invalid; "
        f"max_seq_length={seq_len} max_predictions_per_seq={max_preds}"
        f"{' (v2 names)' if v2 else ''}{' GZIP' if compression else ''}", file=out)
  print(f"  mean length {stats['tokens'] / count:.1f}, full-length "
        f"{stats['full_length'] / count:.1%}, mean masked {stats['masked'] / count:.2f}, "
        f"random-next {stats['random_next'] / count:.1%}", file=out)
  if meta and "counts" in meta and "instances_in_file" in meta["counts"]:
    expected = meta["counts"]["instances_in_file"]
    if expected != stats["instances"] + invalid:
      print(f"  metadata says {expected} records, the file holds {stats['instances'] + invalid}",
            file=out)
      invalid += 1
  for text in examples:
    print("  " + text, file=out)
  return invalid


def main(argv):
  paths = argv[1:]
  if not paths:
    raise app.UsageError("give one or more TFRecord files")
  bad = 0
  for path in paths:
    if not os.path.exists(path) and features.is_local_path(path):
      print(f"error: {path}: no such file")
      bad += 1
      continue
    bad += inspect_file(path, vocab_file=FLAGS.vocab_file, num_examples=FLAGS.num_examples,
                        max_seq_length=FLAGS.max_seq_length,
                        max_predictions_per_seq=FLAGS.max_predictions_per_seq,
                        compression=FLAGS.compression, max_errors=FLAGS.max_errors)
  return 1 if bad else 0


def define_flags():
  """Defined on demand: create_pretraining_data defines flags of the same names."""
  flags.DEFINE_string("vocab_file", None,
                      "Vocab to decode ids with (default: the one named in the metadata).")
  flags.DEFINE_integer("num_examples", 3, "How many instances per file to decode as text.")
  flags.DEFINE_integer("max_seq_length", None, "Override: sequence length (else metadata/record).")
  flags.DEFINE_integer("max_predictions_per_seq", None,
                       "Override: prediction slots (else metadata/record).")
  flags.DEFINE_enum("compression", None, ["", "GZIP"],
                    "Override: compression (else metadata, else none).")
  flags.DEFINE_integer("max_errors", 10, "Stop listing invalid records of a file after this many.")


if __name__ == "__main__":
  define_flags()
  app.run(main)
