"""extract_features' inputs: text lines -> InputExamples (a pair at the last " ||| ")
-> InputFeatures (the original's layout), read lazily and batched; the run is in run.py."""

import dataclasses
import queue
import re
import threading
from typing import Any, Iterable, Iterator, List, Optional

from absl import logging

from bert_tf import io
from bert_tf import tokenization
from bert_tf.tasks import pairs
from bert_tf.tasks.features.settings import FeatureExtractionError

# The original's pair separator; the first group is greedy, so the split is at the last one.
_PAIR = re.compile(r"^(.*) \|\|\| (.*)$")


# === Examples and features ===


@dataclasses.dataclass(frozen=True)
class InputExample:
  """One input line: its 0-based line number and its text(s) (text_b None for a single text)."""
  unique_id: int
  text_a: str
  text_b: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class InputFeatures:
  """The model inputs of one line; the id lists are padded to seq_length, tokens are not."""
  unique_id: int
  tokens: List[str]
  input_ids: List[int]
  input_mask: List[int]
  input_type_ids: List[int]


def check_input_file(input_file: str) -> None:
  if not io.exists(input_file):
    raise FileNotFoundError(f"--input_file={input_file}: no such file")
  if io.isdir(input_file):
    raise FileNotFoundError(f"--input_file={input_file} is a directory, expected a text file")


def example_from_line(unique_id: int, line: str) -> InputExample:
  """One stripped line -> an InputExample, a pair when it holds " ||| " (split at the last)."""
  match = _PAIR.match(line)
  if match is None:
    return InputExample(unique_id, line, None)
  return InputExample(unique_id, match.group(1), match.group(2))


def read_examples(input_file: str) -> Iterator[InputExample]:
  """The examples of a text file, one per line, read lazily (a generator).

  Raises (when iterated):
    FileNotFoundError: a missing input file (naming --input_file).
    FeatureExtractionError: a line that is not valid UTF-8 (file and line named).
  """
  check_input_file(input_file)
  warned = False
  with io.open_file(input_file, "rb") as f:
    # Binary lines end at b"\n" only, as the original's GFile.readline.
    for unique_id, raw in enumerate(f):
      try:
        line = tokenization.convert_to_unicode(raw)
      except ValueError as e:
        raise FeatureExtractionError(f"{input_file}:{unique_id + 1}: {e}") from None
      line, joined = io.as_tf_readline(line)
      if joined and not warned:
        warned = True
        logging.warning("%s:%d: a carriage return (\\r) inside the line is deleted, as the "
                        "original's reader deletes it, joining the text either side (so is "
                        "every later one)", input_file, unique_id + 1)
      yield example_from_line(unique_id, line.strip())


def count_lines(input_file: str, chunk_size: int = 1 << 22) -> int:
  """The number of examples read_examples yields (lines, the last one maybe without "\\n"),
  counted in binary chunks without decoding."""
  check_input_file(input_file)
  count, last = 0, b"\n"
  with io.open_file(input_file, "rb") as f:
    while True:
      chunk = f.read(chunk_size)
      if not chunk:
        break
      count += chunk.count(b"\n")
      last = chunk[-1:]
  return count + (last != b"\n")


class _FeatureConverter:
  """Example -> InputFeatures, as the original's convert_examples_to_features."""

  def __init__(self, seq_length: int, tokenizer):
    if seq_length < 2:
      raise FeatureExtractionError(f"--max_seq_length={seq_length}: at least 2 are needed for "
                                   "[CLS] and [SEP]")
    self.seq_length = seq_length
    self.tokenizer = tokenizer
    self.cls_id, self.sep_id = tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]"])
    to_ids = getattr(tokenizer, "tokenize_to_ids", None)
    self.to_ids = to_ids if to_ids is not None else \
        (lambda text: tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text)))

  def __call__(self, example: InputExample) -> InputFeatures:
    seq_length = self.seq_length
    ids_a = self.to_ids(example.text_a)
    # The original tokenizes B only when text_b is non-empty and pairs only when B has pieces.
    ids_b = self.to_ids(example.text_b) if example.text_b else None
    if ids_b:
      if seq_length < 3:
        raise FeatureExtractionError(
            f"line {example.unique_id + 1} is a pair, which needs --max_seq_length >= 3 "
            f"([CLS] A [SEP] B [SEP]), got {seq_length}")
      pairs.truncate_seq_pair(ids_a, ids_b, seq_length - 3)
    else:
      del ids_a[seq_length - 2:]
    ids = [self.cls_id] + ids_a + [self.sep_id]
    num_segment_a = len(ids)
    if ids_b:  # truncation may have emptied B: then the single layout, as the original
      ids += ids_b + [self.sep_id]
    num_tokens = len(ids)
    padding = [0] * (seq_length - num_tokens)
    return InputFeatures(
        unique_id=example.unique_id,
        tokens=self.tokenizer.convert_ids_to_tokens(ids),
        input_ids=ids + padding,
        input_mask=[1] * num_tokens + padding,
        input_type_ids=[0] * num_segment_a + [1] * (num_tokens - num_segment_a) + padding)


def convert_examples_to_features(examples: Iterable[InputExample], seq_length: int,
                                 tokenizer) -> Iterator[InputFeatures]:
  """InputExamples -> InputFeatures, lazily (the original's name and arguments; it returned a
  list, this is a generator: wrap it in list() for one).

  Args:
    examples: InputExamples (e.g. read_examples(path)).
    seq_length: the padded length (--max_seq_length).
    tokenizer: a tokenization.FullTokenizer (anything with tokenize, convert_tokens_to_ids
      and convert_ids_to_tokens).
  """
  converter = _FeatureConverter(seq_length, tokenizer)
  for example in examples:
    yield converter(example)


def batches(items: Iterable[Any], batch_size: int) -> Iterator[List[Any]]:
  """Lists of batch_size consecutive items (the last may be shorter), lazily."""
  batch = []
  for item in items:
    batch.append(item)
    if len(batch) == batch_size:
      yield batch
      batch = []
  if batch:
    yield batch


def prefetched(items: Iterator[Any], depth: int = 2) -> Iterator[Any]:
  """`items` produced by a background thread at most `depth` ahead: the next batch is read
  and tokenized while the model runs (TensorFlow releases the GIL)."""
  buffer: "queue.Queue" = queue.Queue(maxsize=depth)
  done = object()
  stop = threading.Event()

  def put(entry) -> bool:
    """Waits for room unless the consumer has stopped (then a full queue would block forever)."""
    while not stop.is_set():
      try:
        buffer.put(entry, timeout=0.1)
        return True
      except queue.Full:
        continue
    return False

  def produce():
    try:
      for item in items:
        if not put((item, None)):
          return
      put((done, None))
    except BaseException as e:  # pylint: disable=broad-except
      put((done, e))

  thread = threading.Thread(target=produce, name="extract_features_reader", daemon=True)
  thread.start()
  try:
    while True:
      item, error = buffer.get()
      if item is done:
        if error is not None:
          raise error
        return
      yield item
  finally:
    stop.set()
    thread.join()
