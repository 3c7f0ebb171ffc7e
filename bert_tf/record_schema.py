"""The pretraining TFRecord schema: feature names, dtypes, lengths, serialisation and metadata.

One `tf.train.Example` per training instance, as the original create_pretraining_data.py:
write_instance_to_example_files writes them. This module is the single definition shared by the
data writer (bert_tf/data) and the training input pipeline, so a
feature renamed or resized here changes both sides at once. `RecordFileWriter` is the one
atomic TFRecord file writer, used by every writer of fine-tuning and feature records.

TensorFlow is imported lazily, inside the few functions that need it: data-preparation workers
encode records with `ExampleEncoder` (pure Python) and should not pay TensorFlow's import cost
(~0.7 GB and several seconds per process).
"""

import collections
import contextlib
import functools
import gc
import hashlib
import json
import struct
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from bert_tf import io

# === Feature names ===

# Canonical names (the original release's). Everything in bert_tf refers to features by these
# keys; `feature_names()` maps them to the names actually stored in a file.
INPUT_IDS = "input_ids"
INPUT_MASK = "input_mask"
SEGMENT_IDS = "segment_ids"
MASKED_LM_POSITIONS = "masked_lm_positions"
MASKED_LM_IDS = "masked_lm_ids"
MASKED_LM_WEIGHTS = "masked_lm_weights"
NEXT_SENTENCE_LABELS = "next_sentence_labels"

# Keras models here take TF Hub's names for the three encoder inputs; the records keep the
# original's. Batches are renamed once, where tf.data hands them to a model (to_model_names).
MODEL_INPUT_NAMES = {INPUT_IDS: "input_word_ids", INPUT_MASK: "input_mask",
                     SEGMENT_IDS: "input_type_ids"}


def to_model_names(batch: Mapping[str, Any]) -> Dict[str, Any]:
  """A batch keyed by canonical names -> the same values under the models' input names."""
  return {MODEL_INPUT_NAMES.get(name, name): value for name, value in batch.items()}


# The original's insertion order (write_instance_to_example_files' OrderedDict).
CANONICAL_NAMES = (INPUT_IDS, INPUT_MASK, SEGMENT_IDS, MASKED_LM_POSITIONS, MASKED_LM_IDS,
                   MASKED_LM_WEIGHTS, NEXT_SENTENCE_LABELS)

# Model Garden's `use_v2_feature_names` renames only these two.
_V2_RENAMES = {INPUT_IDS: "input_word_ids", SEGMENT_IDS: "input_type_ids"}

# Length of each feature: the sequence length, the number of prediction slots, or one.
SEQUENCE = "max_seq_length"
PREDICTIONS = "max_predictions_per_seq"
_LENGTH_KIND = {
    INPUT_IDS: SEQUENCE,
    INPUT_MASK: SEQUENCE,
    SEGMENT_IDS: SEQUENCE,
    MASKED_LM_POSITIONS: PREDICTIONS,
    MASKED_LM_IDS: PREDICTIONS,
    MASKED_LM_WEIGHTS: PREDICTIONS,
    NEXT_SENTENCE_LABELS: 1,
}
_FLOAT_FEATURES = frozenset([MASKED_LM_WEIGHTS])

# Limits every writer and reader agrees on.
MAX_SEQ_LENGTH_LIMIT = 512  # BERT's released position embeddings.
MIN_SEQ_LENGTH = 5  # [CLS] A [SEP] B [SEP] with at least one token each in A and B.

METADATA_SUFFIX = ".metadata.json"
METADATA_FORMAT = "bert_tf.pretraining_data/1"


class SchemaError(ValueError):
  """Records or metadata that do not match the pretraining schema."""


def feature_names(use_v2_feature_names: bool = False) -> Dict[str, str]:
  """Canonical name -> stored name, in the original's feature order."""
  renames = _V2_RENAMES if use_v2_feature_names else {}
  return collections.OrderedDict((name, renames.get(name, name)) for name in CANONICAL_NAMES)


def feature_lengths(max_seq_length: int, max_predictions_per_seq: int) -> Dict[str, int]:
  """Canonical name -> fixed length of the feature."""
  sizes = {SEQUENCE: max_seq_length, PREDICTIONS: max_predictions_per_seq}
  return collections.OrderedDict(
      (name, sizes.get(_LENGTH_KIND[name], _LENGTH_KIND[name])) for name in CANONICAL_NAMES)


def feature_dtype_name(name: str) -> str:
  """'float32' for the masked-LM weights, 'int64' for everything else (canonical name)."""
  return "float32" if name in _FLOAT_FEATURES else "int64"


def parsing_spec(max_seq_length: int, max_predictions_per_seq: int,
                 use_v2_feature_names: bool = False) -> Dict[str, Any]:
  """The `tf.io.parse_single_example` / `parse_example` spec for one pretraining record.

  Keys are the stored names (v1 or v2); every feature has a static length.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  names = feature_names(use_v2_feature_names)
  lengths = feature_lengths(max_seq_length, max_predictions_per_seq)
  spec = collections.OrderedDict()
  for canonical, stored in names.items():
    dtype = tf.float32 if canonical in _FLOAT_FEATURES else tf.int64
    spec[stored] = tf.io.FixedLenFeature([lengths[canonical]], dtype)
  return spec


@contextlib.contextmanager
def collector_paused():
  """Suspends Python's cyclic garbage collector (if on) while records are built in bulk.

  Converting and writing examples creates millions of short-lived lists, dicts and tuples
  (tokens, ids, maps, n-best entries) that form no reference cycles, so the collector never
  frees any of them; yet it runs every few hundred allocations, and now and then walks every
  container the process holds (a kept set of eval features, or a caller's own data). For the
  SQuAD conversion that walking was once a quarter of the time. Reference counting still
  frees everything as usual; only cycles (none are made by the converters) wait until the end.
  """
  was_enabled = gc.isenabled()
  gc.disable()
  try:
    yield
  finally:
    if was_enabled:
      gc.enable()


# === Serialisation ===
#
# `ExampleEncoder` writes the protobuf wire format of a `tf.train.Example` directly. Its output is
# byte-for-byte `tf.train.Example.SerializeToString(deterministic=True)` (map entries sorted by
# key, repeated fields packed), which tests check; it is several times faster than building the
# proto message and keeps the bytes identical from run to run and across protobuf backends.


def varint(value: int) -> bytes:
  """Protobuf base-128 varint of a non-negative int (negative int64 use the 10-byte form)."""
  if value < 0:
    value += 1 << 64
  out = bytearray()
  while value > 0x7F:
    out.append((value & 0x7F) | 0x80)
    value >>= 7
  out.append(value)
  return bytes(out)


@functools.lru_cache(maxsize=4)
def varint_table(size: int) -> Tuple[bytes, ...]:
  """(varint(i) for i in range(size)) as a tuple, built a few times faster (vocabularies reach
  250k) and kept for the next writer that asks for the same size."""
  table = [bytes((i,)) for i in range(min(size, 1 << 7))]
  table += [bytes((i & 0x7F | 0x80, i >> 7)) for i in range(1 << 7, min(size, 1 << 14))]
  table += [bytes((i & 0x7F | 0x80, (i >> 7) & 0x7F | 0x80, i >> 14))
            for i in range(1 << 14, min(size, 1 << 21))]
  table += [varint(i) for i in range(1 << 21, size)]
  return tuple(table)


def length_delimited(field_number: int, payload: bytes) -> bytes:
  """A length-delimited protobuf field (wire type 2): key, length, payload."""
  return varint((field_number << 3) | 2) + varint(len(payload)) + payload


# Feature's oneof fields: which kind of list a feature-map entry holds.
INT64_LIST = b"\x1a"  # Feature.int64_list, field 3
FLOAT_LIST = b"\x12"  # Feature.float_list, field 2

# The names of a values mapping, in key order -> those names sorted by their UTF-8 bytes (the
# order of deterministic serialisation); writers call with the same few name sets.
_NAME_ORDERS: Dict[tuple, List[str]] = {}


class EntryHeaders(dict):
  """n_packed -> the bytes that precede n_packed bytes of packed values in one feature-map entry.

  `EntryHeaders(name)[len(packed)] + packed` is the map entry {key: name, value:
  Feature{int64_list: {value: packed}}} (for packed non-empty); kind_tag FLOAT_LIST makes it a
  float_list. Writers whose entries take few distinct lengths (padded sequences) compute each
  header once; entry_headers() shares one per name and kind.
  """

  def __init__(self, name: str, kind_tag: bytes = INT64_LIST):
    super().__init__()
    self.key = length_delimited(1, name.encode("utf-8"))
    self._kind_tag = kind_tag

  def __missing__(self, n_packed: int) -> bytes:
    if n_packed <= 0:
      raise ValueError(f"an entry header needs a non-empty packed list, got {n_packed} bytes")
    n_list = 1 + len(varint(n_packed)) + n_packed
    n_feature = 1 + len(varint(n_list)) + n_list
    n_entry = len(self.key) + 1 + len(varint(n_feature)) + n_feature
    header = self[n_packed] = b"".join((
        b"\x0a", varint(n_entry), self.key, b"\x12", varint(n_feature), self._kind_tag,
        varint(n_list), b"\x0a", varint(n_packed)))
    return header


@functools.lru_cache(maxsize=None)
def entry_headers(name: str, kind_tag: bytes = INT64_LIST) -> EntryHeaders:
  """The EntryHeaders of a feature name and kind, shared by every writer in the process."""
  return EntryHeaders(name, kind_tag)


def feature_entry(name: str, packed: bytes, kind_tag: bytes = INT64_LIST) -> bytes:
  """Map entry {key: name, value: Feature{kind: {value: packed}}}; an empty list is an empty
  list message (no value field), as deterministic serialisation writes it."""
  headers = entry_headers(name, kind_tag)
  if packed:
    return headers[len(packed)] + packed
  return length_delimited(1, headers.key + length_delimited(2, kind_tag + b"\x00"))


def pack_int64(items: Sequence[int], varints: Optional[Sequence[bytes]] = None) -> bytes:
  """The packed varints of an int64 list (the payload of Int64List's packed value field)."""
  if type(items) in (list, tuple):  # pylint: disable=unidiomatic-typecheck
    if len(items) == 1:  # one value (a label, a position, an id): a table lookup
      value = items[0]
      if varints is not None and value.__class__ is int and 0 <= value < len(varints):
        return varints[value]
      return varint(value)
    # 0..127 is its own one-byte varint, so a list of them (masks, segment ids, labels) packs
    # as bytes(items): one C call; bytes() refuses negatives and values above 255, and
    # isascii() refuses 128..255. (Not for arrays: bytes() of an array is its raw buffer.)
    try:
      small = bytes(items)
    except (TypeError, ValueError):
      small = None
    if small is not None and small.isascii():
      return small
  if varints is not None and len(items) > 1 and min(items) >= 0:
    try:
      return b"".join(map(varints.__getitem__, items))
    except IndexError:
      pass
  return b"".join(map(varint, items))


def serialize_int64_example(values: Mapping[str, Sequence[int]],
                            varints: Optional[Sequence[bytes]] = None) -> bytes:
  """A tf.train.Example of int64 lists, as SerializeToString(deterministic=True) writes it.

  Deterministic serialisation orders the feature map's entries by key; each value is
  Feature{int64_list (field 3): Int64List{value (field 1, packed)}} (an empty list writes no
  value field). Negative values take the 10-byte two's complement varint. `varints`, a
  varint_table, makes small non-negative values a lookup.
  """
  return serialize_packed_int64_example(
      {name: pack_int64(items, varints) for name, items in values.items()})


def serialize_packed_int64_example(packed: Mapping[str, bytes]) -> bytes:
  """serialize_int64_example given each list already packed (pack_int64's bytes): for writers
  that build the packed bytes of their features from precomputed pieces."""
  names = tuple(packed)
  order = _NAME_ORDERS.get(names)
  if order is None:
    order = _NAME_ORDERS[names] = sorted(names, key=lambda n: n.encode("utf-8"))
  return length_delimited(1, b"".join([feature_entry(name, packed[name]) for name in order]))


class ExampleEncoder:
  """Encodes pretraining instances as deterministic serialised `tf.train.Example`s.

  Args:
    max_seq_length: length of the input_ids / input_mask / segment_ids features.
    max_predictions_per_seq: length of the masked_lm_* features.
    vocab_size: token ids must be in [0, vocab_size) (they are looked up in a table).
    use_v2_feature_names: store input_word_ids / input_type_ids instead of input_ids /
      segment_ids.
  """

  def __init__(self, max_seq_length: int, max_predictions_per_seq: int, vocab_size: int,
               use_v2_feature_names: bool = False):
    self.max_seq_length = max_seq_length
    self.max_predictions_per_seq = max_predictions_per_seq
    self.vocab_size = vocab_size
    self.names = feature_names(use_v2_feature_names)
    # Varint of every value an int64 feature can hold (ids, positions, 0/1).
    self._varints = varint_table(max(vocab_size, max_seq_length, 1 << 14))
    # Deterministic serialisation orders map entries by the key's bytes.
    self._order = sorted(CANONICAL_NAMES, key=lambda n: self.names[n].encode("utf-8"))
    self._headers = {n: entry_headers(self.names[n]) for n in CANONICAL_NAMES}
    # Entries that depend only on a count are built once.
    self._mask_entries = {}
    self._weight_entries = {}
    self._nsp_entries = [self._int64_entry(NEXT_SENTENCE_LABELS, b"\x00"),
                         self._int64_entry(NEXT_SENTENCE_LABELS, b"\x01")]

  def _int64_entry(self, name: str, packed: bytes) -> bytes:
    if packed:
      return self._headers[name][len(packed)] + packed
    return feature_entry(self.names[name], packed)

  def encode(self, input_ids: Sequence[int], num_segment_a: int,
             masked_lm_positions: Sequence[int], masked_lm_ids: Sequence[int],
             is_random_next: bool) -> bytes:
    """Serialises one instance, padding every feature to its fixed length.

    Args:
      input_ids: the token ids of `[CLS] A [SEP] B [SEP]` (at most max_seq_length).
      num_segment_a: how many leading tokens have segment id 0 (len(A) + 2); the rest get 1.
      masked_lm_positions: positions of the predicted tokens, ascending.
      masked_lm_ids: the original ids at those positions.
      is_random_next: True when B is not A's actual continuation (label 1).

    Returns:
      The bytes of `tf.train.Example.SerializeToString(deterministic=True)`.
    """
    seq_len = self.max_seq_length
    max_preds = self.max_predictions_per_seq
    num_tokens = len(input_ids)
    num_preds = len(masked_lm_positions)
    if num_tokens > seq_len:
      raise SchemaError(f"instance has {num_tokens} tokens, more than max_seq_length={seq_len}")
    if num_preds > max_preds or num_preds != len(masked_lm_ids):
      raise SchemaError(
          f"instance has {num_preds} masked positions and {len(masked_lm_ids)} masked ids; "
          f"both must be equal and at most max_predictions_per_seq={max_preds}")
    if not 0 <= num_segment_a <= num_tokens:
      raise SchemaError(f"num_segment_a={num_segment_a} outside [0, {num_tokens}]")
    for values, limit, what in ((input_ids, self.vocab_size, "token id"),
                                (masked_lm_ids, self.vocab_size, "masked token id"),
                                (masked_lm_positions, num_tokens, "masked position")):
      # min/max run in C; a negative index would otherwise pick a table entry from the end.
      if values and (min(values) < 0 or max(values) >= limit):
        raise SchemaError(f"{what} out of range [0, {limit}): min {min(values)}, "
                          f"max {max(values)}")
    lookup = self._varints.__getitem__
    ids_bytes = b"".join(map(lookup, input_ids))
    label_bytes = b"".join(map(lookup, masked_lm_ids))
    position_bytes = b"".join(map(lookup, masked_lm_positions))
    seq_pad = b"\x00" * (seq_len - num_tokens)
    pred_pad = b"\x00" * (max_preds - num_preds)

    mask_entry = self._mask_entries.get(num_tokens)
    if mask_entry is None:
      mask_entry = self._int64_entry(INPUT_MASK, b"\x01" * num_tokens + seq_pad)
      self._mask_entries[num_tokens] = mask_entry
    weight_entry = self._weight_entries.get(num_preds)
    if weight_entry is None:
      weights = _FLOAT_ONE * num_preds + _FLOAT_ZERO * (max_preds - num_preds)
      weight_entry = feature_entry(self.names[MASKED_LM_WEIGHTS], weights, FLOAT_LIST)
      self._weight_entries[num_preds] = weight_entry
    entries = {
        INPUT_IDS: self._int64_entry(INPUT_IDS, ids_bytes + seq_pad),
        INPUT_MASK: mask_entry,
        SEGMENT_IDS: self._int64_entry(
            SEGMENT_IDS,
            b"\x00" * num_segment_a + b"\x01" * (num_tokens - num_segment_a) + seq_pad),
        MASKED_LM_POSITIONS: self._int64_entry(MASKED_LM_POSITIONS, position_bytes + pred_pad),
        MASKED_LM_IDS: self._int64_entry(MASKED_LM_IDS, label_bytes + pred_pad),
        MASKED_LM_WEIGHTS: weight_entry,
        NEXT_SENTENCE_LABELS: self._nsp_entries[1 if is_random_next else 0],
    }
    body = b"".join([entries[name] for name in self._order])
    return b"\x0a" + varint(len(body)) + body  # Example.features is field 1


_FLOAT_ONE = struct.pack("<f", 1.0)
_FLOAT_ZERO = struct.pack("<f", 0.0)


def decode_example(record: bytes, max_seq_length: int, max_predictions_per_seq: int,
                   use_v2_feature_names: bool = False) -> Dict[str, List]:
  """Parses one serialised record into canonical name -> list of values, checking the schema.

  Raises:
    SchemaError: a feature is missing, has the wrong type, or the wrong length.
  """
  from tensorflow.core.example import example_pb2  # pylint: disable=g-import-not-at-top
  from google.protobuf import message  # pylint: disable=g-import-not-at-top

  example = example_pb2.Example()
  try:
    example.ParseFromString(record)
  except message.DecodeError as e:
    raise SchemaError(f"not a tf.train.Example: {e}") from None
  stored = example.features.feature
  lengths = feature_lengths(max_seq_length, max_predictions_per_seq)
  names = feature_names(use_v2_feature_names)
  extra = sorted(set(stored.keys()) - set(names.values()))
  if extra:
    raise SchemaError(f"unexpected features {extra} (expected {list(names.values())})")
  out = collections.OrderedDict()
  for canonical, name in names.items():
    if name not in stored:
      raise SchemaError(f"feature {name!r} is missing")
    kind = stored[name].WhichOneof("kind")
    want = "float_list" if canonical in _FLOAT_FEATURES else "int64_list"
    if kind != want:
      raise SchemaError(f"feature {name!r} is a {kind}, expected {want}")
    values = list(getattr(stored[name], kind).value)
    if len(values) != lengths[canonical]:
      raise SchemaError(
          f"feature {name!r} has {len(values)} values, expected {lengths[canonical]}")
    out[canonical] = values
  return out


# === Writing a record file ===


class RecordFileWriter:
  """A TFRecord file written atomically: the records go to a temporary file (bert_tf.io), which
  becomes `path` when the `with` block ends without an exception; after an exception nothing is
  left under `path` (an interrupted conversion never looks complete).

  Usage: `with record_schema.RecordFileWriter(path) as writer: writer.write(serialized)`. The
  fine-tuning feature writers (squad_data.FeatureWriter, tagging_data.FeatureWriter) subclass it
  to serialise their windows; num_records counts what was written.
  """

  def __init__(self, path: str):
    self.path = path
    self.num_records = 0
    self._writer = None
    self._exit_stack: Optional[contextlib.ExitStack] = None

  def __enter__(self):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    with contextlib.ExitStack() as stack:
      tmp = stack.enter_context(io.atomic_path(self.path))
      self._writer = stack.enter_context(tf.io.TFRecordWriter(tmp))
      self._exit_stack = stack.pop_all()
    return self

  def write(self, record: bytes) -> None:
    """Appends one serialised record."""
    if self._writer is None:
      raise ValueError(f"{self.path}: records are written inside `with RecordFileWriter(...)`")
    self._writer.write(record)
    self.num_records += 1

  def __exit__(self, exc_type, exc, tb):
    # Closes the TFRecord file, then renames it to `path` (or removes it after an exception).
    stack, self._exit_stack, self._writer = self._exit_stack, None, None
    return stack.__exit__(exc_type, exc, tb)


# === Metadata file ===
#
# Beside every output file, `<file>.metadata.json` records how the data was made, so the training
# side can refuse data whose sequence length, prediction count, vocabulary or casing contradict
# its own flags (the most common silent mistake with the original scripts).


class MetadataError(ValueError):
  """A metadata file that is unreadable or contradicts the flags it is checked against."""


def metadata_path(record_file: str) -> str:
  """Where the metadata of `record_file` lives."""
  return record_file + METADATA_SUFFIX


def vocab_checksum(vocab_file: str) -> str:
  """md5 hex digest of the vocab file's bytes (the figure in data/README.md)."""
  digest = hashlib.md5()
  with io.open_file(vocab_file, "rb") as f:
    while True:
      block = f.read(1 << 20)
      if not block:
        break
      digest.update(block)
  return digest.hexdigest()


def make_metadata(*, max_seq_length: int, max_predictions_per_seq: int,
                  use_v2_feature_names: bool, vocab_size: int, vocab_md5: str,
                  do_lower_case: bool, do_whole_word_mask: bool, flags: Mapping[str, Any],
                  counts: Mapping[str, Any], program_version: str,
                  compression: Optional[str] = None) -> Dict[str, Any]:
  """Builds the metadata dictionary (JSON-serialisable) for one output file.

  Size: eleven keyword-only parameters, one per field of the metadata file it makes.
  """
  names = feature_names(use_v2_feature_names)
  lengths = feature_lengths(max_seq_length, max_predictions_per_seq)
  return collections.OrderedDict([
      ("format", METADATA_FORMAT),
      ("program_version", program_version),
      ("max_seq_length", max_seq_length),
      ("max_predictions_per_seq", max_predictions_per_seq),
      ("use_v2_feature_names", bool(use_v2_feature_names)),
      ("compression", compression or ""),
      ("features", [collections.OrderedDict([
          ("name", names[n]), ("dtype", feature_dtype_name(n)), ("length", lengths[n])])
                    for n in CANONICAL_NAMES]),
      ("vocab_size", vocab_size),
      ("vocab_md5", vocab_md5),
      ("do_lower_case", bool(do_lower_case)),
      ("do_whole_word_mask", bool(do_whole_word_mask)),
      ("counts", dict(counts)),
      ("flags", dict(flags)),
  ])


def write_metadata(path: str, metadata: Mapping[str, Any]) -> None:
  """Writes the JSON atomically (temporary name, then rename)."""
  io.write_text(path, json.dumps(metadata, indent=2, sort_keys=False) + "\n")


def read_metadata(path: str) -> Dict[str, Any]:
  """Reads and sanity-checks a metadata file."""
  try:
    with io.open_file(path, "r") as f:
      text = f.read()
  except Exception as e:  # pylint: disable=broad-except
    # FileNotFoundError locally, tf.errors.NotFoundError elsewhere.
    if type(e).__name__ not in ("FileNotFoundError", "NotFoundError"):
      raise
    raise MetadataError(f"{path}: metadata file not found") from None
  try:
    metadata = json.loads(text)
  except json.JSONDecodeError as e:
    raise MetadataError(f"{path}: not valid JSON: {e}") from None
  if not isinstance(metadata, dict) or metadata.get("format") != METADATA_FORMAT:
    raise MetadataError(f"{path}: not a pretraining-data metadata file "
                        f"(expected \"format\": \"{METADATA_FORMAT}\")")
  for key in ("max_seq_length", "max_predictions_per_seq", "use_v2_feature_names"):
    if key not in metadata:
      raise MetadataError(f"{path}: missing key {key!r}")
  return metadata


def check_metadata(metadata: Mapping[str, Any], *, source: str = "metadata",
                   max_seq_length: Optional[int] = None,
                   max_predictions_per_seq: Optional[int] = None,
                   use_v2_feature_names: Optional[bool] = None,
                   vocab_size: Optional[int] = None,
                   do_lower_case: Optional[bool] = None) -> None:
  """Raises MetadataError naming each flag whose value contradicts the data's metadata.

  Arguments left as None are not checked. `vocab_size` is checked as "the model's vocabulary
  covers every id in the data" (a model vocab larger than the data's is allowed).
  """
  problems = []
  for flag, value in (("max_seq_length", max_seq_length),
                      ("max_predictions_per_seq", max_predictions_per_seq),
                      ("use_v2_feature_names", use_v2_feature_names),
                      ("do_lower_case", do_lower_case)):
    if value is not None and flag in metadata and metadata[flag] != value:
      problems.append(f"--{flag}={value} but the data was made with {flag}={metadata[flag]}")
  if (vocab_size is not None and "vocab_size" in metadata
      and metadata["vocab_size"] > vocab_size):
    problems.append(f"vocab_size={vocab_size} but the data was made with a vocabulary of "
                    f"{metadata['vocab_size']} tokens")
  if problems:
    raise MetadataError(f"{source}: " + "; ".join(problems))
