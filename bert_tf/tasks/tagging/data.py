"""Token classification data: CoNLL files, WordPiece alignment, windows and records.

The original release never shipped token classification (google-research/bert#345, #223, #581);
the paper fine-tunes for CoNLL-2003 NER with the label of each word on its first WordPiece. This
module is that recipe, with every word predicted exactly once.

CoNLL files (`read_conll`): one word per line, the word in the first column and the tag in the
last (columns separated by spaces or tabs; every word line of a file has the same number of
columns), a blank line between sentences, and `-DOCSTART-` lines starting a new document (the
line itself is not a word). Any tag set: IOB1 (CoNLL-2003's original files), IOB2, IOBES, or
plain tags such as POS, but one per file: a tag outside the scheme the file's other tags use is
refused naming the file and line (check_scheme). A predict file may have the word column only.

Alignment: each word is tokenized on its own by the FullTokenizer (a word the tokenizer turns
into nothing, e.g. a lone control character or accent, becomes one [UNK], so that it is still
predicted). The word's label goes on its first piece; later pieces, [CLS], [SEP], context words
and padding have label_mask 0: no loss and no prediction (HF's label_all_tokens pitfall,
transformers#14043, cannot happen).

Windows (`plan_windows`): with B = max_seq_length - 2 pieces per window,
  * a sentence of at most B pieces is one window, centred on the sentence inside its context
    (the sentence alone, or its document with document_context) and filled with as much of the
    context as fits;
  * a longer sentence is cut into parts of S = B // 2 pieces by the position of each word's first
    piece; the window of a part starts (B - S) // 2 pieces before it (moved back inside the
    context at either end), so a word is predicted with at least a quarter window of context on
    each side where there is any, and every word is predicted in exactly one window.
Context pieces may be cut mid-word at a window's edge; they only give context.

Records (`FeatureWriter`): input_ids, input_mask, segment_ids (all 0), label_ids (the label's
index, 0 where not labelled; UNLABELLED_ID, -1, at the words of a --transfer_file sentence,
which has no tags) and label_mask, max_seq_length int64 each, one record per window.
"""

import dataclasses
import re
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from absl import logging

from bert_tf import io
from bert_tf import record_schema
from bert_tf.tasks.tagging import metrics as tagging_metrics

DOCSTART = "-DOCSTART-"
OUTSIDE = "O"
# The record's features (InputFeatures' fields of the same names), written by
# serialize_feature and read through record_spec.
LABEL_IDS, LABEL_MASK = "label_ids", "label_mask"
# The label id of a word without a tag in the training records (run_ner --transfer_file): its
# first piece counts in a teacher's soft loss only.
UNLABELLED_ID = -1
RECORD_FIELDS = (record_schema.INPUT_IDS, record_schema.INPUT_MASK, record_schema.SEGMENT_IDS,
                 LABEL_IDS, LABEL_MASK)
_COLUMNS = re.compile(r"[ \t]+")


class ConllFormatError(ValueError):
  """A CoNLL file that cannot be read; the message names the file and line."""


@dataclasses.dataclass(frozen=True)
class Sentence:
  """One sentence of a CoNLL file.

  Attributes:
    words: the words (first column).
    tags: their tags (last column), or None for a file without tags.
    document: the index of its document in the file (0 before any -DOCSTART-).
    line: the 1-based line of its first word; word i is on line `line + i`.
  """
  words: Tuple[str, ...]
  tags: Optional[Tuple[str, ...]]
  document: int
  line: int


def parse_conll(text: str, path: str, labelled: Optional[bool] = True) -> List[Sentence]:
  """The sentences of a CoNLL file's text (see read_conll)."""
  sentences: List[Sentence] = []
  columns = None
  first_line = None
  document = 0
  words: List[str] = []
  tags: List[str] = []
  start = 0
  seen_docstart = False

  def close():
    nonlocal words, tags
    if words:
      sentences.append(Sentence(tuple(words), tuple(tags) if labelled else None, document,
                                start))
    words, tags = [], []

  for number, line in enumerate(text.split("\n"), 1):
    stripped = line.strip(" \t\r")
    if not stripped:
      close()
      continue
    fields = _COLUMNS.split(stripped)
    if fields[0] == DOCSTART:
      close()
      if seen_docstart or sentences:
        document += 1
      seen_docstart = True
      continue
    if columns is None:
      columns, first_line = len(fields), number
      if labelled is None:
        labelled = columns > 1
      if labelled and columns < 2:
        raise ConllFormatError(
            f"{path}:{number}: one column ({stripped[:60]!r}); a labelled CoNLL file needs "
            "the word in the first column and its tag in the last")
    elif len(fields) != columns:
      raise ConllFormatError(
          f"{path}:{number}: {len(fields)} columns ({stripped[:60]!r}) but line {first_line} "
          f"has {columns}; every word line needs the same columns (word first, tag last)")
    if not words:
      start = number
    words.append(fields[0])
    tags.append(fields[-1])
  close()
  if not sentences:
    raise ConllFormatError(f"{path}: no sentence (a CoNLL file has one word per line and a "
                           "blank line between sentences)")
  check_scheme(sentences, path)
  return sentences


def check_scheme(sentences: Sequence[Sentence], path: str) -> None:
  """Refuses a tag outside the scheme the file's other tags use, naming the file and line.

  "PER" or "b-loc" among B-/I- tags would be a label of its own and turn entity scores into
  token accuracy ("plain" tags); an S- tag among IOB2 tags would make the file IOBES. See
  tagging_metrics.scheme_conflict for the rules; the one mix that changes neither the labels
  nor conlleval's scores (I- and B- both starting entities after "O") is a warning.

  Raises:
    ConllFormatError: naming the file, line, word and tag, and the scheme of the other tags.
  """
  tagged = [s for s in sentences if s.tags is not None]
  conflict = tagging_metrics.scheme_conflict(s.tags for s in tagged)
  if conflict is None:
    return
  sentence = tagged[conflict.sentence]
  where = (f"{path}:{sentence.line + conflict.token}: tag {conflict.tag!r} (word "
           f"{sentence.words[conflict.token]!r}) {conflict.reason}")
  if not conflict.fatal:
    logging.warning("%s; read as %s", where, tagging_metrics.detect_scheme(s.tags for s in tagged
                                                                            ).upper())
    return
  raise ConllFormatError(f"{where}; correct the file so that it uses one scheme")


def read_conll(path: str, labelled: Optional[bool] = True) -> List[Sentence]:
  """Reads a CoNLL file (through tf.io.gfile for non-local paths).

  Args:
    path: the file.
    labelled: True: every word line needs a tag (a training or eval file); None: a file whose
      lines have one column is read without tags (a predict file), otherwise with them.

  Raises:
    FileNotFoundError: no such file.
    ConllFormatError: naming the file and line: a line with another number of columns than
      the first, a labelled file with one column, or no sentence at all.
  """
  if not io.exists(path):
    raise FileNotFoundError(f"{path}: no such CoNLL file")
  raw = io.open_file(path, "rb")
  with raw as f:
    data = f.read()
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError as e:
    line = data[:e.start].count(b"\n") + 1
    raise ConllFormatError(f"{path}:{line}: not valid UTF-8 ({e.reason})") from None
  return parse_conll(text, path, labelled)


def tags_of(sentences: Iterable[Sentence]) -> List[List[str]]:
  return [list(s.tags) for s in sentences if s.tags is not None]


def label_list(sentences: Sequence[Sentence], given: Optional[Sequence[str]] = None,
               path: str = "the training file") -> List[str]:
  """The labels of a tagging task: `given` (checked), or the training file's tags.

  Inferred labels are "O" first (when present), then the other tags sorted, so the same file
  gives the same label ids on every run.

  Raises:
    ConllFormatError: `given` repeats a tag or misses one of the file's (naming file and line).
  """
  if given is not None:
    labels = list(given)
    if not labels:
      raise ConllFormatError("the label list is empty")
    duplicated = sorted({t for t in labels if labels.count(t) > 1})
    if duplicated:
      raise ConllFormatError(f"the label list repeats {', '.join(duplicated)}")
    check_tags(sentences, {t: i for i, t in enumerate(labels)}, path)
    return labels
  found = {t for s in sentences for t in (s.tags or ())}
  if not found:
    raise ConllFormatError(f"{path} has no tags to learn")
  rest = sorted(found - {OUTSIDE})
  return ([OUTSIDE] if OUTSIDE in found else []) + rest


def check_tags(sentences: Sequence[Sentence], label_map: Mapping[str, int], path: str) -> None:
  """Refuses a tag the labels do not have, naming the file, line and tag."""
  for sentence in sentences:
    for i, tag in enumerate(sentence.tags or ()):
      if tag not in label_map:
        raise ConllFormatError(
            f"{path}:{sentence.line + i}: tag {tag!r} (word {sentence.words[i]!r}) is not one "
            f"of the {len(label_map)} labels the model learns ({', '.join(label_map)}); pass "
            "--labels (or --labels_file) with every tag of the task")


# === WordPieces ===


class WordPieces:
  """Each word's WordPiece ids (cached: a corpus repeats its words), at least one per word."""

  def __init__(self, tokenizer):
    self.tokenizer = tokenizer
    self.unk_id = tokenizer.vocab["[UNK]"]
    self.cls_id = tokenizer.vocab["[CLS]"]
    self.sep_id = tokenizer.vocab["[SEP]"]
    self._cache: Dict[str, Tuple[int, ...]] = {}
    self.empty_words = 0

  def __call__(self, word: str) -> Tuple[int, ...]:
    ids = self._cache.get(word)
    if ids is None:
      ids = tuple(self.tokenizer.convert_tokens_to_ids(self.tokenizer.tokenize(word)))
      if not ids:
        ids = ()
      self._cache[word] = ids
    if not ids:
      self.empty_words += 1
      return (self.unk_id,)
    return ids


# === Windows ===


def plan_windows(num_pieces: int, target_start: int, target_end: int, budget: int
                 ) -> List[Tuple[int, int, int]]:
  """Where the windows of one sentence go (see the module docstring).

  Args:
    num_pieces: the pieces of the context (the sentence, or its document).
    target_start, target_end: the sentence's pieces within the context.
    budget: pieces per window (max_seq_length - 2).

  Returns:
    (window_start, owned_start, owned_end) per window: the window holds context pieces
    [window_start, window_start + budget) and predicts the words whose first piece is in
    [owned_start, owned_end).
  """
  if budget < 1:
    raise ValueError(f"a window needs at least one piece, got budget {budget}")
  length = target_end - target_start
  last_start = max(0, num_pieces - budget)
  if length <= budget:
    start = min(max(target_start - (budget - length) // 2, 0), last_start)
    return [(start, target_start, target_end)]
  stride = max(1, budget // 2)
  left = (budget - stride) // 2
  return [(min(max(owned - left, 0), last_start), owned, min(owned + stride, target_end))
          for owned in range(target_start, target_end, stride)]


@dataclasses.dataclass
class InputFeatures:
  """One window.

  Attributes:
    unique_id: the window's number in its file (its record's position).
    example_index: the sentence it predicts (index into the sentences).
    input_ids, input_mask, segment_ids, label_ids, label_mask: max_seq_length ints each.
    word_positions: (word index in the sentence, position in the window) of each predicted word.
  """
  unique_id: int
  example_index: int
  input_ids: List[int]
  input_mask: List[int]
  segment_ids: List[int]
  label_ids: List[int]
  label_mask: List[int]
  word_positions: List[Tuple[int, int]]


def convert_sentences_to_features(
    sentences: Sequence[Sentence], label_map: Optional[Mapping[str, int]], max_seq_length: int,
    tokenizer, output_fn: Callable[[InputFeatures], None], document_context: bool = False,
    stats: Optional[Dict[str, int]] = None, unlabelled_id: int = 0) -> int:
  """Turns sentences into windows (InputFeatures), passed to output_fn in sentence order.

  Args:
    sentences: from read_conll.
    label_map: tag -> label id; None (or sentences without tags) gives label_ids 0.
    max_seq_length: the window length with [CLS] and [SEP] (at least 3).
    tokenizer: a FullTokenizer.
    output_fn: called with each window.
    document_context: fill each window with the neighbouring sentences of the same document
      (the paper's setting) instead of the sentence alone.
    stats: if given, filled with sentences, windows, split_sentences (sentences needing more
      than one window), words and empty_words (words the tokenizer turned into nothing).
    unlabelled_id: the label id of each word's first piece in a sentence without tags
      (run_ner --transfer_file: UNLABELLED_ID, whose positions only a teacher's soft targets
      train); label_mask is 1 there either way.

  Returns:
    The number of windows.
  """
  if max_seq_length < 3:
    raise ValueError(f"max_seq_length must be at least 3 ([CLS], a piece, [SEP]), got "
                     f"{max_seq_length}")
  pieces_of = WordPieces(tokenizer)
  budget = max_seq_length - 2
  counts = dict(sentences=0, windows=0, split_sentences=0, words=0)
  unique_id = 0
  for group in _context_groups(sentences, document_context):
    context: List[int] = []
    starts: List[List[int]] = []  # first-piece position of each word, per sentence of the group
    bounds: List[Tuple[int, int]] = []
    for index in group:
      begin = len(context)
      firsts = []
      for word in sentences[index].words:
        firsts.append(len(context))
        context.extend(pieces_of(word))
      starts.append(firsts)
      bounds.append((begin, len(context)))
    for member, index in enumerate(group):
      sentence = sentences[index]
      begin, end = bounds[member]
      windows = plan_windows(len(context), begin, end, budget)
      counts["sentences"] += 1
      counts["words"] += len(sentence.words)
      counts["split_sentences"] += len(windows) > 1
      for window_start, owned_start, owned_end in windows:
        ids = [pieces_of.cls_id] + context[window_start:window_start + budget] + \
            [pieces_of.sep_id]
        label_ids = [0] * max_seq_length
        label_mask = [0] * max_seq_length
        positions = []
        for w, first in enumerate(starts[member]):
          if owned_start <= first < owned_end:
            position = first - window_start + 1
            positions.append((w, position))
            label_mask[position] = 1
            if label_map is not None and sentence.tags is not None:
              label_ids[position] = label_map[sentence.tags[w]]
            else:
              label_ids[position] = unlabelled_id
        padding = max_seq_length - len(ids)
        output_fn(InputFeatures(
            unique_id=unique_id, example_index=index, input_ids=ids + [0] * padding,
            input_mask=[1] * len(ids) + [0] * padding, segment_ids=[0] * max_seq_length,
            label_ids=label_ids, label_mask=label_mask, word_positions=positions))
        unique_id += 1
  counts["windows"] = unique_id
  counts["empty_words"] = pieces_of.empty_words
  if stats is not None:
    stats.update(counts)
  return unique_id


def _context_groups(sentences: Sequence[Sentence], document_context: bool
                    ) -> Iterable[List[int]]:
  """Indexes of the sentences that share a context: each alone, or each document's."""
  if not document_context:
    for index in range(len(sentences)):
      yield [index]
    return
  group: List[int] = []
  for index, sentence in enumerate(sentences):
    if group and sentences[group[-1]].document != sentence.document:
      yield group
      group = []
    group.append(index)
  if group:
    yield group


def read_plain_sentences(path: str) -> List[Sentence]:
  """The sentences of a plain text file (run_ner --transfer_file): one per non-blank line, its
  words split at whitespace (spaces and tabs, as a CoNLL file's word column holds them; each
  word is then split into WordPieces as the task's own words), without tags; each line is a
  document of its own (no context from its neighbours).

  Raises:
    ConllFormatError: a missing file, or one without a word (naming the file).
  """
  if not io.exists(path):
    raise ConllFormatError(f"--transfer_file={path} does not exist")
  sentences = []
  for number, line in enumerate(io.read_text(path).splitlines(), 1):
    words = tuple(line.split())
    if words:
      sentences.append(Sentence(words=words, tags=None, document=len(sentences), line=number))
  if not sentences:
    raise ConllFormatError(f"--transfer_file={path} has no line of text")
  return sentences


# === Records ===


def record_spec(max_seq_length: int) -> Dict[str, Tuple[Tuple[int, ...], str]]:
  """run_ner's record schema, as {feature: (shape, dtype)} for the input pipeline's reader
  (input_pipeline.parsing_spec): RECORD_FIELDS, max_seq_length int64 each."""
  return {name: ((max_seq_length,), "int64") for name in RECORD_FIELDS}


def serialize_feature(feature: InputFeatures) -> bytes:
  """The window's tf.train.Example (int64 lists, deterministic serialisation)."""
  return record_schema.serialize_int64_example({name: getattr(feature, name)
                                                for name in RECORD_FIELDS})


class FeatureWriter(record_schema.RecordFileWriter):
  """Writes InputFeatures to a TFRecord file, which appears under `filename` only when the
  `with` block succeeds (record_schema.RecordFileWriter); also keeps the features when `keep` is
  set (prediction needs their word positions)."""

  def __init__(self, filename: str, keep: bool = False):
    super().__init__(filename)
    self.features: List[InputFeatures] = []
    self._keep = keep

  @property
  def num_features(self) -> int:
    return self.num_records

  def __call__(self, feature: InputFeatures) -> None:
    if self._keep:
      self.features.append(feature)
    self.write(serialize_feature(feature))


# === Predictions back onto words ===


def word_predictions(features_list: Sequence[InputFeatures], label_ids,
                     sentences: Sequence[Sentence], labels: Sequence[str]) -> List[List[str]]:
  """The predicted tag of every word, from the windows' predicted label ids.

  Args:
    features_list: the windows, in record order.
    label_ids: [windows, max_seq_length] predicted label ids (argmax of the logits).
    sentences: the sentences the windows came from.
    labels: id -> tag.

  Raises:
    ValueError: a word predicted by no window or by two (a bug, never silent).
  """
  predicted: List[List[Optional[str]]] = [[None] * len(s.words) for s in sentences]
  for feature, row in zip(features_list, label_ids):
    tags = predicted[feature.example_index]
    for word, position in feature.word_positions:
      if tags[word] is not None:
        raise ValueError(f"sentence {feature.example_index}: word {word} predicted twice")
      tags[word] = labels[int(row[position])]
  for index, tags in enumerate(predicted):
    if any(t is None for t in tags):
      raise ValueError(f"sentence {index} (line {sentences[index].line}): a word has no "
                       "prediction")
  return predicted  # type: ignore[return-value]


def format_predictions(sentences: Sequence[Sentence], predicted: Sequence[Sequence[str]]
                       ) -> str:
  """CoNLL text of the predictions: `word gold predicted` per line (`word predicted` for a
  file without tags), a blank line after each sentence; conlleval reads it as is."""
  lines = []
  for sentence, tags in zip(sentences, predicted):
    for i, word in enumerate(sentence.words):
      if sentence.tags is None:
        lines.append(f"{word} {tags[i]}")
      else:
        lines.append(f"{word} {sentence.tags[i]} {tags[i]}")
    lines.append("")
  return "\n".join(lines) + ("\n" if lines else "")


def log_stats(stats: Mapping[str, int], what: str) -> None:
  logging.info("%s: %d sentences, %d words, %d windows", what, stats.get("sentences", 0),
               stats.get("words", 0), stats.get("windows", 0))
  if stats.get("split_sentences"):
    logging.info("%s: %d sentences are longer than one window and were predicted in several "
                 "(every word exactly once)", what, stats["split_sentences"])
  if stats.get("empty_words"):
    logging.warning("%s: %d words tokenize to nothing (control characters, lone accents); "
                    "each is read as [UNK]", what, stats["empty_words"])
