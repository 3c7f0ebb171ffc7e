"""Checking pretraining TFRecords: schema, internal consistency, summary figures, decoding.

The library half of data_prep/inspect_records.py.
"""

import collections
import sys
from typing import Dict, List, Optional

from bert_tf import features
from bert_tf import io
from bert_tf.data import writer as writer_lib


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
  if io.exists(meta_path) or not io.is_local(path):
    try:
      meta = features.read_metadata(meta_path)
    except features.MetadataError as e:
      if io.exists(meta_path) or "not found" not in str(e):
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
      with io.open_file(vocab_file, "rb") as f:
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
