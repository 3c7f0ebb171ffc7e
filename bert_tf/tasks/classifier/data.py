"""The data half of the original run_classifier.py: examples, features and records.

The processors that read a task's files into InputExamples are in classifier_processors. What
carries over from the original release (google-research/bert, run_classifier.py):

* `convert_single_example` gives the original's features: `[CLS] A [SEP]` (segment 0) then
  `B [SEP]` (segment 1) when B has tokens, the original's truncation (pop from the longer list,
  from B on a tie), zero padding, is_real_example, all-zero features for a PaddingInputExample.
* `file_based_convert_examples_to_features` writes one tf.train.Example per example with the
  int64 features input_ids, input_mask, segment_ids, label_ids, is_real_example — the bytes equal
  `SerializeToString(deterministic=True)` of the message the original builds.

Deliberate differences: an unknown label is a ValueError naming the label and the label list
(the original raised KeyError); a pair with max_seq_length 2 is a ValueError (the original
popped from an empty list). For a regression task (STS-B) the label list is None, labels are
floats and the records store `label_ids` as a float.

Examples hold text; tokenization happens in `convert_single_example`, with the tokenizer's
`tokenize_to_ids` (the same ids as `convert_tokens_to_ids(tokenize(...))`, cached per word).
TensorFlow is imported only to write records, which are encoded here without building protobuf
messages.
"""

import dataclasses
import itertools
import struct
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from absl import logging

from bert_tf import record_schema
from bert_tf import tokenization
from bert_tf.tasks.pairs import truncated_pair_lengths

# === Examples and features ===


@dataclasses.dataclass
class InputExample:
  """One classification example.

  Attributes:
    guid: a unique id, e.g. "train-17" (used in logs and errors).
    text_a: the first sequence (untokenized text).
    text_b: the second sequence, or None for single-sequence tasks. An empty string is treated
      as None, as in the original.
    label: the label string (a float for regression tasks); test sets carry a constant.
  """
  guid: str
  text_a: str
  text_b: Optional[str] = None
  label: Any = None


# The label of a transfer example (run_classifier --transfer_file: an input without a label,
# which only a teacher's soft targets train on), and the label id its record holds.
UNLABELLED = "<unlabelled>"
UNLABELLED_ID = -1


class PaddingInputExample:
  """A fake example that fills up the last batch (eval/predict on TPU).

  It becomes all-zero features with is_real_example = False, so metrics give it weight 0 and
  prediction output skips it.
  """

  def __repr__(self):
    return "PaddingInputExample()"

  def __eq__(self, other):
    return isinstance(other, PaddingInputExample)

  def __hash__(self):
    return hash(PaddingInputExample)


@dataclasses.dataclass
class InputFeatures:
  """The model inputs of one example, each sequence padded to max_seq_length."""
  input_ids: List[int]
  input_mask: List[int]
  segment_ids: List[int]
  label_id: Union[int, float]
  is_real_example: bool = True


# === Examples -> features ===


class _Converter:
  """Example -> (ids of [CLS] A [SEP] (B [SEP]), number of segment-0 ids, label id)."""

  def __init__(self, label_list: Optional[Sequence[str]], max_seq_length: int, tokenizer):
    if max_seq_length < 2:
      raise ValueError(f"max_seq_length={max_seq_length}: at least 2 are needed for [CLS] and "
                       "[SEP]")
    self.label_list = None if label_list is None else list(label_list)
    # Later duplicates win, as in the original's loop.
    self.label_map = None if label_list is None else \
        {label: i for i, label in enumerate(self.label_list)}
    self.max_seq_length = max_seq_length
    self.tokenizer = tokenizer
    self.cls_id, self.sep_id = tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]"])
    to_ids = getattr(tokenizer, "tokenize_to_ids", None)
    self.to_ids = to_ids if to_ids is not None else \
        (lambda text: tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text)))

  def label_id(self, example: InputExample) -> Union[int, float]:
    if self.label_map is None:
      try:
        return float(example.label)
      except (TypeError, ValueError):
        raise ValueError(f"example {example.guid}: label {example.label!r} is not a number "
                         "(regression: label_list is None)") from None
    if example.label is UNLABELLED:
      return UNLABELLED_ID
    try:
      return self.label_map[example.label]
    except (KeyError, TypeError):
      raise ValueError(f"example {example.guid}: unknown label {example.label!r}; the label "
                       f"list is {self.label_list}") from None

  def ids(self, example: InputExample) -> Tuple[List[int], int]:
    if example.text_a is None:
      raise ValueError(f"example {example.guid}: text_a is None")
    max_seq_length = self.max_seq_length
    ids_a = self.to_ids(example.text_a)
    # As the original: B only when text_b is non-empty, and a pair only when B has tokens.
    ids_b = self.to_ids(example.text_b) if example.text_b else None
    if ids_b:
      if max_seq_length < 3:
        raise ValueError(f"example {example.guid}: a pair needs max_seq_length >= 3 "
                         f"([CLS] A [SEP] B [SEP]), got {max_seq_length}")
      len_a, len_b = truncated_pair_lengths(len(ids_a), len(ids_b), max_seq_length - 3)
      del ids_a[len_a:]
      del ids_b[len_b:]
    else:
      del ids_a[max_seq_length - 2:]
    ids = [self.cls_id]
    ids += ids_a
    ids.append(self.sep_id)
    num_segment_a = len(ids)
    if ids_b:  # truncation may have emptied B: then the layout is single-segment, as the original
      ids += ids_b
      ids.append(self.sep_id)
    return ids, num_segment_a

  def log(self, ex_index: int, example: InputExample, features: InputFeatures) -> None:
    """The original's log of an example (it logs the first five)."""
    num_tokens = sum(features.input_mask)
    to_tokens = getattr(self.tokenizer, "convert_ids_to_tokens", None)
    tokens = to_tokens(features.input_ids[:num_tokens]) if to_tokens else []
    logging.info("*** Example %d ***", ex_index)
    logging.info("guid: %s", example.guid)
    logging.info("tokens: %s", " ".join(tokens))
    logging.info("input_ids: %s", " ".join(map(str, features.input_ids)))
    logging.info("input_mask: %s", " ".join(map(str, features.input_mask)))
    logging.info("segment_ids: %s", " ".join(map(str, features.segment_ids)))
    logging.info("label: %s (id = %s)", example.label, features.label_id)


class _PackedIds:
  """Examples -> (packed varints of _Converter.ids(), number of ids, num_segment_a), no lists.

  Only for a tokenizer that is exactly a FullTokenizer (basic tokenizer, then WordPiece word by
  word; see for_converter). A text's packed ids are then the join of its words' packed ids,
  cached per word, and the number of ids is the number of varint-final bytes (those below
  0x80). A chunk of examples is tokenized at once (BasicTokenizer.tokenize_joined) and its
  bytes split at _BREAK, which packed ids never contain: with ids below 2**21 a varint has at
  most two high-bit bytes before its final one.
  """

  _FINAL_BYTES = bytes(range(0x80))
  _BREAK = b"\xff\xff\xff"
  _MAX_VOCAB = 1 << 21

  def __init__(self, converter: _Converter, varints: Sequence[bytes]):
    self.max_seq_length = converter.max_seq_length
    tokenizer = converter.tokenizer
    self._words = tokenizer.basic_tokenizer.tokenize_joined
    word_ids = tokenizer.wordpiece_tokenizer.word_ids
    lookup = varints.__getitem__
    text_break, break_bytes = tokenization.TEXT_BREAK, self._BREAK
    self._word_bytes = tokenization.WordCache(
        lambda word: break_bytes if word == text_break else b"".join(map(lookup, word_ids(word))),
        tokenization.DEFAULT_CACHE_SIZE)
    self._cls, self._sep = varints[converter.cls_id], varints[converter.sep_id]

  @classmethod
  def for_converter(cls, converter: _Converter, varints: Sequence[bytes]
                    ) -> Optional["_PackedIds"]:
    """A _PackedIds, or None when the tokenizer is not exactly a FullTokenizer (e.g. a subclass
    that changes tokenize) or has ids outside `varints` or from 2**21 on."""
    tokenizer = converter.tokenizer
    kinds = (type(tokenizer), type(getattr(tokenizer, "basic_tokenizer", None)),
             type(getattr(tokenizer, "wordpiece_tokenizer", None)))
    if kinds != (tokenization.FullTokenizer, tokenization.BasicTokenizer,
                 tokenization.WordpieceTokenizer) or \
        max(tokenizer.vocab.values(), default=0) >= min(len(varints), cls._MAX_VOCAB):
      return None
    return cls(converter, varints)

  def chunk(self, examples: Sequence[Union[InputExample, PaddingInputExample]]
            ) -> List[Optional[Tuple[bytes, int, int]]]:
    """Per example: its packed ids, or None for a padding example, a text_a of None, or an
    example that needs truncating (_Converter.ids handles those)."""
    texts = []
    for example in examples:
      if isinstance(example, PaddingInputExample):
        texts += ("", "")
      else:
        texts += (example.text_a or "", example.text_b or "")
    packed = b"".join(map(self._word_bytes.__getitem__, self._words(texts))).split(self._BREAK)
    final_bytes = self._FINAL_BYTES
    limit = self.max_seq_length
    cls_bytes, sep_bytes = self._cls, self._sep
    out = []
    for example, bytes_a, bytes_b in zip(examples, packed[0::2], packed[1::2]):
      len_a = len(bytes_a) - len(bytes_a.translate(None, final_bytes))
      # As _Converter.ids: B only when text_b is non-empty, and a pair only when B has tokens.
      if bytes_b:
        len_b = len(bytes_b) - len(bytes_b.translate(None, final_bytes))
        out.append((b"".join((cls_bytes, bytes_a, sep_bytes, bytes_b, sep_bytes)),
                    len_a + len_b + 3, len_a + 2) if len_a + len_b <= limit - 3 else None)
      else:
        out.append((b"".join((cls_bytes, bytes_a, sep_bytes)), len_a + 2, len_a + 2)
                   if len_a <= limit - 2 else None)
    return out


# Examples tokenized at once by _PackedIds.chunk.
_CHUNK_SIZE = 1024


def _padding_features(max_seq_length: int, regression: bool) -> InputFeatures:
  zeros = [0] * max_seq_length
  return InputFeatures(input_ids=list(zeros), input_mask=list(zeros), segment_ids=list(zeros),
                       label_id=0.0 if regression else 0, is_real_example=False)


def convert_single_example(ex_index: int, example: Union[InputExample, PaddingInputExample],
                           label_list: Optional[Sequence[str]], max_seq_length: int,
                           tokenizer) -> InputFeatures:
  """One example -> InputFeatures, exactly as the original.

  Args:
    ex_index: the example's position; the first five are logged.
    example: an InputExample, or a PaddingInputExample (all-zero features, label 0,
      is_real_example False).
    label_list: labels in id order (label id = index), or None for regression (label_id is
      float(label)).
    max_seq_length: length of every sequence after padding.
    tokenizer: a FullTokenizer (anything with tokenize and convert_tokens_to_ids; its
      tokenize_to_ids is used when present).

  Raises:
    ValueError: a label not in label_list (the label and the list named), a pair with
      max_seq_length < 3, or max_seq_length < 2.
  """
  if isinstance(example, PaddingInputExample):
    return _padding_features(max_seq_length, label_list is None)
  converter = _Converter(label_list, max_seq_length, tokenizer)
  features = _features(converter, example)
  if ex_index < 5:
    converter.log(ex_index, example, features)
  return features


def _features(converter: _Converter, example: InputExample) -> InputFeatures:
  ids, num_segment_a = converter.ids(example)
  label_id = converter.label_id(example)
  num_tokens = len(ids)
  padding = [0] * (converter.max_seq_length - num_tokens)
  return InputFeatures(
      input_ids=ids + padding,
      input_mask=[1] * num_tokens + padding,
      segment_ids=[0] * num_segment_a + [1] * (num_tokens - num_segment_a) + padding,
      label_id=label_id,
      is_real_example=True)


# === Records ===
#
# A tf.train.Example is written here as protobuf wire bytes: Example.features (field 1) holds one
# map entry (field 1: key = 1, value = 2) per feature, and a Feature holds an Int64List (field 3)
# or FloatList (field 2) whose values (field 1) are packed. Deterministic serialisation orders
# the map entries by key, which is what is written; tests compare with
# tf.train.Example(...).SerializeToString(deterministic=True).

# The record's features, written by _RecordEncoder and read through record_spec.
INPUT_IDS, INPUT_MASK, SEGMENT_IDS = (record_schema.INPUT_IDS, record_schema.INPUT_MASK,
                                      record_schema.SEGMENT_IDS)
LABEL_IDS, IS_REAL_EXAMPLE = "label_ids", "is_real_example"


def record_spec(max_seq_length: int, regression: bool = False
                ) -> Dict[str, Tuple[Tuple[int, ...], str]]:
  """The original run_classifier.py's record schema, as {feature: (shape, dtype)} for the
  input pipeline's reader (input_pipeline.parsing_spec): label_ids is a float for regression."""
  sequence = ((max_seq_length,), "int64")
  return {INPUT_IDS: sequence, INPUT_MASK: sequence, SEGMENT_IDS: sequence,
          LABEL_IDS: ((), "float32" if regression else "int64"), IS_REAL_EXAMPLE: ((), "int64")}


class _RecordEncoder:
  """InputFeatures parts -> serialised tf.train.Example bytes (deterministic serialisation)."""

  def __init__(self, max_seq_length: int, vocab_size: int, regression: bool):
    self.max_seq_length = max_seq_length
    self.regression = regression
    # Varints of every token id and of every length a record can have.
    self.varints = record_schema.varint_table(max(vocab_size, 3 * max_seq_length + 64, 0x4000))
    self._ids_headers = record_schema.entry_headers(INPUT_IDS)
    # Segment ids are 0/1, one byte each: their entry's header is the same for every record.
    self._segment_header = record_schema.entry_headers(SEGMENT_IDS)[max_seq_length]
    # Entries that depend only on a count are built once.
    self._mask_entries: Dict[int, bytes] = {}
    self._label_entries: Dict[Any, bytes] = {}
    self._real_entries = [record_schema.feature_entry(IS_REAL_EXAMPLE, b"\x00"),
                          record_schema.feature_entry(IS_REAL_EXAMPLE, b"\x01")]

  def _label_entry(self, label_id: Union[int, float]) -> bytes:
    entry = self._label_entries.get(label_id)
    if entry is None:
      if self.regression:  # one float in a float_list
        entry = record_schema.feature_entry(LABEL_IDS, struct.pack("<f", label_id),
                                            record_schema.FLOAT_LIST)
      else:
        entry = record_schema.feature_entry(LABEL_IDS, record_schema.varint(label_id))
      self._label_entries[label_id] = entry
    return entry

  def id_bytes(self, ids: Sequence[int]) -> bytes:
    """The packed varints of token ids."""
    try:
      if min(ids) >= 0:
        return b"".join(map(self.varints.__getitem__, ids))
    except IndexError:
      pass
    return b"".join(map(record_schema.varint, ids))

  def encode(self, ids: Sequence[int], num_segment_a: int, label_id: Union[int, float],
             is_real_example: bool) -> bytes:
    return self.encode_packed(self.id_bytes(ids) if ids else b"", len(ids), num_segment_a,
                              label_id, is_real_example)

  def encode_packed(self, id_bytes: bytes, num_tokens: int, num_segment_a: int,
                    label_id: Union[int, float], is_real_example: bool) -> bytes:
    """encode() given the ids already packed (num_tokens varints)."""
    max_seq_length = self.max_seq_length
    mask_entry = self._mask_entries.get(num_tokens)
    if mask_entry is None:
      mask_entry = self._mask_entries[num_tokens] = record_schema.feature_entry(
          INPUT_MASK, b"\x01" * num_tokens + b"\x00" * (max_seq_length - num_tokens))
    padding = b"\x00" * (max_seq_length - num_tokens)
    segments = b"\x00" * num_segment_a + b"\x01" * (num_tokens - num_segment_a) + padding
    # Sorted by key: input_ids, input_mask, is_real_example, label_ids, segment_ids.
    body = b"".join((self._ids_headers[len(id_bytes) + len(padding)], id_bytes, padding, mask_entry,
                     self._real_entries[bool(is_real_example)], self._label_entry(label_id),
                     self._segment_header, segments))
    n_body = len(body)
    return b"\x0a" + (self.varints[n_body] if n_body < len(self.varints)
                       else record_schema.varint(n_body)) + body

  def encode_features(self, features: InputFeatures) -> bytes:
    """The same bytes from padded InputFeatures (must be [CLS]...-shaped: mask 1s then 0s)."""
    num_tokens = sum(features.input_mask)
    num_segment_a = num_tokens - sum(features.segment_ids)
    return self.encode(features.input_ids[:num_tokens], num_segment_a, features.label_id,
                       features.is_real_example)


def serialize_features(features: InputFeatures, max_seq_length: int, regression: bool = False
                       ) -> bytes:
  """One InputFeatures as the bytes of its tf.train.Example (deterministic serialisation)."""
  encoder = _RecordEncoder(max_seq_length, 1 + max(features.input_ids, default=0), regression)
  return encoder.encode_features(features)


def file_based_convert_examples_to_features(
    examples: Sequence[Union[InputExample, PaddingInputExample]],
    label_list: Optional[Sequence[str]], max_seq_length: int, tokenizer,
    output_file: str) -> int:
  """Converts examples (as convert_single_example) and writes them to a TFRecord file.

  One tf.train.Example per example, in order, with the int64 features input_ids, input_mask,
  segment_ids (max_seq_length each), label_ids and is_real_example (one each; label_ids is a
  float when label_list is None, i.e. regression). The file is written atomically
  (record_schema.RecordFileWriter), so a failure leaves no partial output_file.

  Returns:
    The number of records written.
  """
  regression = label_list is None
  converter = _Converter(label_list, max_seq_length, tokenizer)
  encoder = _RecordEncoder(max_seq_length, len(getattr(tokenizer, "vocab", ())), regression)
  packed_ids = _PackedIds.for_converter(converter, encoder.varints)
  total = len(examples) if hasattr(examples, "__len__") else None
  padding_label = 0.0 if regression else 0

  examples = iter(examples)
  count = 0
  with record_schema.RecordFileWriter(output_file) as writer, record_schema.collector_paused():
    while True:
      chunk = list(itertools.islice(examples, _CHUNK_SIZE))
      if not chunk:
        break
      packed_chunk = packed_ids.chunk(chunk) if packed_ids is not None else ()
      for example, packed in itertools.zip_longest(chunk, packed_chunk):
        if count % 10000 == 0:
          logging.info("Writing example %d of %s", count, total)
        if isinstance(example, PaddingInputExample):
          record = encoder.encode((), 0, padding_label, False)
        else:
          if example.text_a is None:
            raise ValueError(f"example {example.guid}: text_a is None")
          label_id = converter.label_id(example)
          if packed is not None:
            record = encoder.encode_packed(*packed, label_id, True)
          else:
            ids, num_segment_a = converter.ids(example)
            record = encoder.encode(ids, num_segment_a, label_id, True)
          if count < 5:
            converter.log(count, example, _features(converter, example))
        writer.write(record)
        count += 1
  return count


def pad_for_tpu(examples: List[Union[InputExample, PaddingInputExample]], batch_size: int
                ) -> List[Union[InputExample, PaddingInputExample]]:
  """Appends PaddingInputExample to `examples` (in place) until its length divides batch_size.

  The original does this for eval and predict on TPU, where every batch must be full; padding
  examples have is_real_example 0, so metrics weigh them 0 and predictions skip them. Returns the
  same list.
  """
  if batch_size <= 0:
    raise ValueError(f"batch_size must be positive, got {batch_size}")
  num_padding = -len(examples) % batch_size
  examples.extend(PaddingInputExample() for _ in range(num_padding))
  if num_padding:
    logging.info("Padded %d real examples with %d PaddingInputExample to a multiple of %d",
                 len(examples) - num_padding, num_padding, batch_size)
  return examples
