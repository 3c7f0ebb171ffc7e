"""The data half of the original run_squad.py: examples, windows and records.

The entry points keep the original's names and arguments, so code written against
google-research/bert's run_squad.py ports by changing an import (the logits' way back to answers
and prediction files is in squad_answers):

* `read_squad_examples(input_file, is_training, version_2_with_negative)`: SQuAD JSON ->
  SquadExample (whitespace words of the context, the answer's word span when training).
* `convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride,
  max_query_length, is_training, output_fn)`: windows of `[CLS] question [SEP] context [SEP]`
  -> InputFeatures, handed to output_fn one by one (a FeatureWriter writes them as records).

Every output is the original's: the same skipped training questions (with the same
"Could not find answer" warning), windows (doc_stride is the step between window starts),
max-context flags, answer positions (including `_improve_answer_span` and start = end = 0 for a
window without the answer), unique_ids and records (the same int64 features, serialised
deterministically). The internals are faster (benchmarks/squad.py measures them against the
original's loops on the same input): the questions of a paragraph share its WordPieces, ids,
windows and max-context flags (computed once per paragraph, not once per question and token);
a window's per-position fields are built only when read (_Window), and until then its record is
framed from the paragraph's varint bytes and post-processing reads the paragraph's lists;
`_improve_answer_span` compares token lists instead of joining strings for every candidate span;
and the cyclic garbage collector is paused while these acyclic objects are built
(record_schema.collector_paused).

Where the original crashes, this module does not (google-research/bert#476, PR #1106):

* An example that produces no window at all (an empty context or one the tokenizer empties)
  gets no feature; squad_answers answers it "" (SQuAD 2.0) or "empty" (1.1).
* A training answer whose answer_start lies outside the context is skipped with the same
  warning as an answer whose text is not at its offset (the original raises IndexError).
* A malformed file (bad JSON, a missing key, a question without an answer) raises
  SquadFormatError naming the file, the question id and the key.
"""

import functools
import itertools
import json
import operator
import re
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from absl import logging
import numpy as np

from bert_tf import io
from bert_tf import record_schema
from bert_tf import tokenization

FIRST_UNIQUE_ID = 1000000000
# The training shuffle of the original's main() (random.Random(12345).shuffle(train_examples)).
TRAIN_SHUFFLE_SEED = 12345


class SquadFormatError(ValueError):
  """A SQuAD file that cannot be read; the message names the file, the question and the key."""


# === Examples ===


class SquadExample:
  """One question with its context split into whitespace words (the original's SquadExample).

  start_position / end_position are word indexes into doc_tokens (training only; -1 for an
  impossible question); orig_answer_text is the answer as written in the file.
  """

  def __init__(self, qas_id, question_text, doc_tokens, orig_answer_text=None,
               start_position=None, end_position=None, is_impossible=False):
    self.qas_id = qas_id
    self.question_text = question_text
    self.doc_tokens = doc_tokens
    self.orig_answer_text = orig_answer_text
    self.start_position = start_position
    self.end_position = end_position
    self.is_impossible = is_impossible

  def __str__(self):
    return self.__repr__()

  def __repr__(self):
    parts = [f"qas_id: {self.qas_id}",
             f"question_text: {self.question_text}",
             f"doc_tokens: [{' '.join(self.doc_tokens)}]"]
    if self.start_position:
      parts.append(f"start_position: {self.start_position}")
    if self.end_position:
      parts.append(f"end_position: {self.end_position}")
    if self.is_impossible:
      parts.append(f"is_impossible: {self.is_impossible}")
    return ", ".join(parts)


# A word: a run of anything but the reader's separators (space, tab, CR, LF and U+202F, the
# narrow no-break space).
_SQUAD_WORD = re.compile("[^ \t\r\n\u202f]+")


def split_context(paragraph_text: str):
  """(doc_tokens, char_to_word_offset) of a context, as the original reader splits it.

  Every character that is not one of the five separators joins the current word; a character
  after a separator starts a new one. char_to_word_offset[i] is the word of character i (a
  separator gets the previous word's index, -1 before the first word).
  """
  return _SQUAD_WORD.findall(paragraph_text), char_to_word_offsets(paragraph_text)


def char_to_word_offsets(paragraph_text: str) -> List[int]:
  """split_context's char_to_word_offset: for each character, the number of words starting at
  or before it, minus one (on arrays: the original's per-character loop is most of reading)."""
  codes = np.frombuffer(paragraph_text.encode("utf-32-le", "surrogatepass"), np.uint32)
  separator = (codes == 0x20) | (codes == 0x09) | (codes == 0x0D) | (codes == 0x0A) | \
      (codes == 0x202F)
  word_start = ~separator
  word_start[1:] &= separator[:-1]
  return (np.cumsum(word_start) - 1).tolist()


def _field(obj: Any, key: str, where: str, path: str, kind=None):
  if not isinstance(obj, dict) or key not in obj:
    raise SquadFormatError(f"{path}: {where} has no {key!r} key")
  value = obj[key]
  if kind is not None and not isinstance(value, kind):
    names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
    raise SquadFormatError(f"{path}: {where}: {key!r} must be a {names}, got "
                           f"{type(value).__name__}")
  return value


def load_squad_json(input_file: str) -> List[Dict[str, Any]]:
  """The articles (the "data" list) of a SQuAD file; SquadFormatError names what is wrong."""
  try:
    text = io.read_text(input_file)
  except UnicodeDecodeError as e:
    raise SquadFormatError(f"{input_file}: not UTF-8 ({e})") from None
  try:
    data = json.loads(text)
  except json.JSONDecodeError as e:
    raise SquadFormatError(f"{input_file}: not valid JSON: {e}") from None
  return _field(data, "data", "the top level", input_file, list)


def read_squad_examples(input_file: str, is_training: bool,
                        version_2_with_negative: bool = False,
                        stats: Optional[Dict[str, int]] = None) -> List[SquadExample]:
  """Reads a SQuAD json file into SquadExamples, as the original.

  Args:
    input_file: a SQuAD v1.1 or v2.0 file (any tf.io.gfile path).
    is_training: read the answers: each answerable question needs exactly one; a question
      whose answer text is not found at its answer_start is skipped with the original's
      warning "Could not find answer: ...".
    version_2_with_negative: read is_impossible (training only; otherwise every question is
      taken as answerable, as the original).
    stats: a dict that receives "questions" (read) and "skipped" (answer not at its offset).

  Raises:
    SquadFormatError: unreadable JSON, a missing key, or a training question with other than
      one answer (naming the file and the question id).
  """
  with record_schema.collector_paused():  # the JSON and the examples make no cycles
    return examples_from_articles(load_squad_json(input_file), input_file, is_training,
                                  version_2_with_negative, stats)


def examples_from_articles(input_data: List[Dict[str, Any]], input_file: str,
                           is_training: bool, version_2_with_negative: bool = False,
                           stats: Optional[Dict[str, int]] = None) -> List[SquadExample]:
  """read_squad_examples on a file's already loaded articles (input_file names it in errors)."""
  examples = []
  questions = skipped = 0
  seen_ids: Dict[str, str] = {}  # id as a JSON key -> where it was first read
  for a, entry in enumerate(input_data):
    paragraphs = _field(entry, "paragraphs", f"article {a}", input_file, list)
    for p, paragraph in enumerate(paragraphs):
      where = f"article {a} paragraph {p}"
      paragraph_text = _field(paragraph, "context", where, input_file, str)
      doc_tokens = _SQUAD_WORD.findall(paragraph_text)
      char_to_word_offset = None  # only training looks answers up, computed on first need
      for q, qa in enumerate(_field(paragraph, "qas", where, input_file, list)):
        qas_id = _field(qa, "id", f"{where} question {q}", input_file, (str, int))
        where_q = f"question {qas_id!r} ({where})"
        # The prediction files are JSON objects keyed by id (the integer 7 and the string "7"
        # are one key): a repeated id would lose all but one of its questions' predictions.
        key = qas_id if isinstance(qas_id, str) else json.dumps(qas_id)
        if key in seen_ids:
          raise SquadFormatError(
              f"{input_file}: question id {qas_id!r} is used twice: by {seen_ids[key]} and by "
              f"{where} question {q}; ids must be unique (predictions are keyed by id)")
        seen_ids[key] = f"{where} question {q}"
        question_text = _field(qa, "question", where_q, input_file, str)
        questions += 1
        start_position = end_position = orig_answer_text = None
        is_impossible = False
        if is_training:
          if version_2_with_negative:
            is_impossible = _field(qa, "is_impossible", where_q, input_file, (bool, int))
          answers = _field(qa, "answers", where_q, input_file, list)
          if len(answers) != 1 and not is_impossible:
            raise SquadFormatError(
                f"{input_file}: {where_q}: for training, each question should have exactly 1 "
                f"answer, it has {len(answers)}")
          if not is_impossible:
            answer = answers[0]
            orig_answer_text = _field(answer, "text", f"{where_q} answer", input_file, str)
            answer_offset = _field(answer, "answer_start", f"{where_q} answer", input_file, int)
            answer_length = len(orig_answer_text)
            if char_to_word_offset is None:
              char_to_word_offset = char_to_word_offsets(paragraph_text)
            try:
              start_position = char_to_word_offset[answer_offset]
              end_position = char_to_word_offset[answer_offset + answer_length - 1]
            except IndexError:
              logging.warning("Could not find answer: answer_start %d of question %r is outside "
                              "its context of %d characters", answer_offset, qas_id,
                              len(paragraph_text))
              skipped += 1
              continue
            actual_text = " ".join(doc_tokens[start_position:(end_position + 1)])
            cleaned_answer_text = " ".join(tokenization.whitespace_tokenize(orig_answer_text))
            if actual_text.find(cleaned_answer_text) == -1:
              logging.warning("Could not find answer: '%s' vs. '%s'", actual_text,
                              cleaned_answer_text)
              skipped += 1
              continue
          else:
            start_position = -1
            end_position = -1
            orig_answer_text = ""
        examples.append(SquadExample(
            qas_id=qas_id, question_text=question_text, doc_tokens=doc_tokens,
            orig_answer_text=orig_answer_text, start_position=start_position,
            end_position=end_position, is_impossible=bool(is_impossible)))
  if skipped:
    logging.warning("%s: skipped %d of %d questions whose answer is not at its answer_start",
                    input_file, skipped, questions)
  if stats is not None:
    stats.update(questions=questions, skipped=skipped)
  return examples


# === Features ===


class InputFeatures:
  """One window of one example (the original's InputFeatures).

  tokens: `[CLS] question [SEP] window [SEP]` (not padded); token_to_orig_map: feature position
  -> word index in the example's doc_tokens, for the window's tokens; token_is_max_context:
  feature position -> whether this window gives that token its most central context;
  input_ids / input_mask / segment_ids: padded to max_seq_length; start_position /
  end_position: the answer's feature positions when training (0, 0 for none).

  Size: twelve parameters, the original's InputFeatures field for field.
  """

  def __init__(self, unique_id, example_index, doc_span_index, tokens, token_to_orig_map,
               token_is_max_context, input_ids, input_mask, segment_ids, start_position=None,
               end_position=None, is_impossible=None):
    self.unique_id = unique_id
    self.example_index = example_index
    self.doc_span_index = doc_span_index
    self.tokens = tokens
    self.token_to_orig_map = token_to_orig_map
    self.token_is_max_context = token_is_max_context
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.segment_ids = segment_ids
    self.start_position = start_position
    self.end_position = end_position
    self.is_impossible = is_impossible

  def doc_part(self):
    """None: post-processing reads tokens and token_to_orig_map (a convert_examples_to_features
    window answers its part of the paragraph instead, see _Window.doc_part)."""
    return None


class DocSpan(NamedTuple):
  start: int
  length: int


class _Question(NamedTuple):
  """What the windows of one question share."""
  tokens: List[str]  # [CLS] question [SEP]
  # Their ids, or None when the tokenizer has no vocab or lacks one of them (the windows'
  # input_ids are then the tokenizer's convert_tokens_to_ids, set at conversion).
  ids: Optional[List[int]]
  # Their ids' varints (None without ids, or when an id is beyond the varint table).
  packed: Optional[bytes]
  sep_id: int
  max_seq_length: int


class _Window(InputFeatures):
  """The InputFeatures convert_examples_to_features makes: the six per-position fields (tokens,
  token_to_orig_map, token_is_max_context, input_ids, input_mask, segment_ids) are built from
  the question's and the paragraph's shared lists when first read, and then kept (and may be
  assigned, as any attribute).

  Until then, serialize_feature writes the record from the shared varints and post-processing
  reads the window's part of the paragraph directly. A SQuAD window has a few hundred
  positions: building its five lists and two dicts for every window is a large share of the
  conversion's time and most of the memory of the eval features run_squad keeps (the measured
  figures are in benchmarks/README.md, SQuAD, "Data step rewritten").
  """

  _TEXT_FIELDS = frozenset(("tokens", "token_to_orig_map", "token_is_max_context"))
  _SEQUENCE_FIELDS = frozenset(("input_ids", "input_mask", "segment_ids"))
  _LAZY = _TEXT_FIELDS | _SEQUENCE_FIELDS

  def __init__(self, unique_id, example_index, doc_span_index, question: _Question,
               window: tuple, flags: Optional[List[bool]], start_position, end_position,
               is_impossible):
    # pylint: disable=super-init-not-called  (the lazy fields are properties)
    self.unique_id = unique_id
    self.example_index = example_index
    self.doc_span_index = doc_span_index
    self.start_position = start_position
    self.end_position = end_position
    self.is_impossible = is_impossible
    self._question = question
    self._window = window  # _Context.window(span): (tokens, ids, word indexes, varints)
    self._flags = flags  # token_is_max_context's values, or None when all are True

  def doc_part(self):
    """(first context position, the window's tokens, their word indexes, max-context flags or
    None for all True) while tokens and both maps are unread (not assigned), else None."""
    if self._TEXT_FIELDS.isdisjoint(self.__dict__):
      return len(self._question.tokens), self._window[0], self._window[2], self._flags
    return None

  def peek(self, name: str):
    """A field's value without keeping it (logging shows every field of the first windows)."""
    if name in self.__dict__ or name not in self._LAZY:
      return getattr(self, name)
    return getattr(type(self), name).func(self)

  def packed_sequences(self) -> Optional[Tuple[bytes, bytes, bytes]]:
    """The varints of input_ids, input_mask and segment_ids while those are unread, else
    None."""
    question, (tokens, _, _, packed) = self._question, self._window
    if question.packed is None or packed is None or \
        not self._SEQUENCE_FIELDS.isdisjoint(self.__dict__):
      return None
    doc_offset, length = len(question.tokens), len(tokens)
    num_tokens = doc_offset + length + 1
    padding = bytes(question.max_seq_length - num_tokens)
    sep = _varints()[question.sep_id]
    return (b"".join((question.packed, packed, sep, padding)),
            b"\x01" * num_tokens + padding,
            bytes(doc_offset) + b"\x01" * (length + 1) + padding)

  @functools.cached_property
  def tokens(self) -> List[str]:  # pylint: disable=method-hidden
    tokens = self._question.tokens + self._window[0]
    tokens.append("[SEP]")
    return tokens

  def _positions(self) -> range:
    doc_offset = len(self._question.tokens)
    return range(doc_offset, doc_offset + len(self._window[0]))

  @functools.cached_property
  def token_to_orig_map(self) -> Dict[int, int]:  # pylint: disable=method-hidden
    return dict(zip(self._positions(), self._window[2]))

  @functools.cached_property
  def token_is_max_context(self) -> Dict[int, bool]:  # pylint: disable=method-hidden
    if self._flags is None:
      return dict.fromkeys(self._positions(), True)
    return dict(zip(self._positions(), self._flags))

  def _padding(self) -> int:
    return self._question.max_seq_length - len(self._question.tokens) - len(self._window[0]) - 1

  @functools.cached_property
  def input_ids(self) -> List[int]:  # pylint: disable=method-hidden
    ids = self._question.ids + self._window[1]
    ids.append(self._question.sep_id)
    ids += [0] * self._padding()
    return ids

  @functools.cached_property
  def input_mask(self) -> List[int]:  # pylint: disable=method-hidden
    padding = self._padding()
    return [1] * (self._question.max_seq_length - padding) + [0] * padding

  @functools.cached_property
  def segment_ids(self) -> List[int]:  # pylint: disable=method-hidden
    return ([0] * len(self._question.tokens) + [1] * (len(self._window[0]) + 1) +
            [0] * self._padding())


def doc_spans(num_tokens: int, max_tokens_for_doc: int, doc_stride: int) -> List[DocSpan]:
  """The windows over num_tokens context tokens: the next window starts doc_stride tokens (or
  the window's length, if shorter) after the last one, until a window reaches the end."""
  spans = []
  start_offset = 0
  while start_offset < num_tokens:
    length = min(num_tokens - start_offset, max_tokens_for_doc)
    spans.append(DocSpan(start_offset, length))
    if start_offset + length == num_tokens:
      break
    start_offset += min(length, doc_stride)
  return spans


def _check_is_max_context(spans: Sequence[DocSpan], cur_span_index: int, position: int) -> bool:
  """Whether window cur_span_index is the one where `position` has the most context (the
  original's rule: score min(left, right) + 0.01 * length; the earliest window wins ties)."""
  best_score = None
  best_span_index = None
  for span_index, span in enumerate(spans):
    end = span.start + span.length - 1
    if position < span.start or position > end:
      continue
    score = min(position - span.start, end - position) + 0.01 * span.length
    if best_score is None or score > best_score:
      best_score = score
      best_span_index = span_index
  return cur_span_index == best_span_index


def max_context_spans(spans: Sequence[DocSpan], num_tokens: int) -> List[int]:
  """For every context token, the window _check_is_max_context picks (all tokens at once)."""
  if len(spans) <= 1:
    return [0 if spans else -1] * num_tokens
  positions = np.arange(num_tokens)
  scores = np.full((len(spans), num_tokens), -np.inf)
  for span_index, span in enumerate(spans):
    end = span.start + span.length - 1
    inside = positions[span.start:end + 1]
    # The same float64 operations as the original's min(left, right) + 0.01 * length.
    scores[span_index, span.start:end + 1] = \
        np.minimum(inside - span.start, end - inside) + 0.01 * span.length
  best = np.argmax(scores, axis=0)  # the first maximum: the earliest window on ties
  best[~np.isfinite(scores.max(axis=0))] = -1
  return best.tolist()


def _improve_answer_span(doc_tokens, input_start, input_end, tokenizer, orig_answer_text):
  """The tightest sub-token span inside [input_start, input_end] that tokenizes like the answer.

  Same result as the original (which joins every candidate span with spaces and compares it with
  the joined answer tokens): tokens never contain a space and are never empty, so the joined
  strings are equal exactly when the token lists are, and the first match of the original's
  search order (lowest start; for that start, the one end whose length matches) is the first
  start where the answer's tokens occur.
  """
  answer_tokens = tokenizer.tokenize(orig_answer_text)
  return _improve_span_tokens(doc_tokens, input_start, input_end, answer_tokens)


def _improve_span_tokens(doc_tokens, input_start, input_end, answer_tokens):
  k = len(answer_tokens)
  if k:
    first = answer_tokens[0]
    for new_start in range(input_start, input_end - k + 2):
      if doc_tokens[new_start] == first and doc_tokens[new_start:new_start + k] == answer_tokens:
        return new_start, new_start + k - 1
  return input_start, input_end


class _Words(dict):
  """word -> (its WordPieces, their ids, the ids' varints), computed once per distinct word
  for all the contexts of a conversion. The ids are None when the tokenizer has no vocab or
  a piece is not in it (convert_tokens_to_ids then raises the tokenizer's own error), the
  varints None when an id is beyond the varint table (then packed per record)."""

  def __init__(self, tokenizer):
    super().__init__()
    # A FullTokenizer's tokenize_word skips the basic tokenizer for plain words (not for a
    # subclass, which may change tokenize).
    exact = type(tokenizer) is tokenization.FullTokenizer  # pylint: disable=unidiomatic-typecheck
    self._tokenize = tokenizer.tokenize_word if exact else tokenizer.tokenize
    self._vocab = getattr(tokenizer, "vocab", None)

  def __missing__(self, word: str) -> tuple:
    pieces = self._tokenize(word)
    ids = packed = None
    if self._vocab is not None:
      try:
        ids = tuple(map(self._vocab.__getitem__, pieces))
      except KeyError:
        pass
    if ids is not None and (not ids or min(ids) >= 0):
      try:
        packed = b"".join(map(_varints().__getitem__, ids))
      except IndexError:
        pass
    entry = self[word] = (pieces, ids, packed)
    return entry


class _Context:
  """A paragraph's WordPieces (and ids), with its windows and max-context flags per window
  size: what every question of the paragraph shares (read_squad_examples gives the questions of
  one paragraph the same doc_tokens list; the original re-tokenizes it for each of them)."""

  def __init__(self, doc_tokens: List[str], words: _Words):
    self.doc_tokens = doc_tokens
    # Built with C-level iterators rather than a loop over the words: a context is a few hundred
    # words, and this runs once per paragraph.
    entries = list(map(words.__getitem__, doc_tokens))
    word_pieces = list(map(operator.itemgetter(0), entries))
    lengths = list(map(len, word_pieces))
    self.all_doc_tokens: List[str] = list(itertools.chain.from_iterable(word_pieces))
    self.tok_to_orig_index: List[int] = list(itertools.chain.from_iterable(
        map(itertools.repeat, range(len(doc_tokens)), lengths)))
    self.orig_to_tok_index: List[int] = list(itertools.accumulate(lengths, initial=0))[:-1]
    word_ids = list(map(operator.itemgetter(1), entries))
    self.doc_ids = None if None in word_ids else \
        list(itertools.chain.from_iterable(word_ids))
    # The ids' varints (serialize_feature's input_ids bytes): a window's bytes are one slice of
    # them (byte offsets computed when a paragraph has several windows).
    word_packed = list(map(operator.itemgetter(2), entries))
    self.doc_packed = None if self.doc_ids is None or None in word_packed else \
        b"".join(word_packed)
    self._byte_offsets = None
    self._windows: Dict[int, tuple] = {}
    self._slices: Dict[DocSpan, tuple] = {}

  def windows(self, max_tokens_for_doc: int, doc_stride: int):
    """(spans, per span its token_is_max_context values in window order, or None when all
    are True) for a window size."""
    found = self._windows.get(max_tokens_for_doc)
    if found is None:
      spans = doc_spans(len(self.all_doc_tokens), max_tokens_for_doc, doc_stride)
      if len(spans) == 1:
        flags = [None]  # one window: every token's best (dict.fromkeys(positions, True))
      else:
        best = np.asarray(max_context_spans(spans, len(self.all_doc_tokens)))
        flags = [(best[span.start:span.start + span.length] == i).tolist()
                 for i, span in enumerate(spans)]
      found = self._windows[max_tokens_for_doc] = (spans, flags)
    return found

  def window(self, span: DocSpan):
    """(tokens, ids or None, word indexes, ids' varints or None) of one window; the questions of
    a short paragraph all get the same single window whatever their length."""
    found = self._slices.get(span)
    if found is None:
      end = span.start + span.length
      ids = self.doc_ids[span.start:end] if self.doc_ids is not None else None
      packed = None
      if self.doc_packed is not None:
        if span.start == 0 and end == len(self.doc_ids):
          packed = self.doc_packed
        else:
          if self._byte_offsets is None:
            table = _varints()
            self._byte_offsets = list(itertools.accumulate(
                map(len, map(table.__getitem__, self.doc_ids)), initial=0))
          packed = self.doc_packed[self._byte_offsets[span.start]:self._byte_offsets[end]]
      found = self._slices[span] = (self.all_doc_tokens[span.start:end], ids,
                                    self.tok_to_orig_index[span.start:end], packed)
    return found


def convert_examples_to_features(examples: Sequence[SquadExample], tokenizer, max_seq_length: int,
                                 doc_stride: int, max_query_length: int, is_training: bool,
                                 output_fn: Callable[[InputFeatures], Any],
                                 stats: Optional[Dict[str, int]] = None) -> int:
  """Splits each example into windows and hands each window's InputFeatures to output_fn.

  As the original: the question is cut to max_query_length WordPieces; a window holds up to
  max_seq_length - len(question) - 3 context tokens; unique_ids count up from 1000000000
  across all examples; when training, an answer not entirely inside a window (and an impossible
  question) gets start = end = 0. The first 20 examples are logged.

  Additions to the original's arguments: `stats`, a dict that receives "features",
  "truncated_questions" (questions cut to max_query_length), "without_window" (examples
  whose context has no WordPiece, so no feature: squad_answers answers them "" / "empty")
  and "answer_outside" (training windows labelled 0, 0 because the answer is not inside them).

  Returns:
    The number of features (the original returns None; the count is an addition).

  Raises:
    ValueError: max_seq_length too short for the question plus [CLS] and two [SEP].
    SquadFormatError: training examples that give no window at all.
  """
  with record_schema.collector_paused():
    return _convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride,
                                         max_query_length, is_training, output_fn, stats)


def _answer_pieces(example, context, tokenizer, is_training: bool):
  """(first, last) WordPiece of the answer in the context: (-1, -1) for an impossible training
  question, (None, None) outside training; the original's _improve_answer_span applied."""
  if not is_training:
    return None, None
  if example.is_impossible:
    return -1, -1
  orig_to_tok_index, all_doc_tokens = context.orig_to_tok_index, context.all_doc_tokens
  start = orig_to_tok_index[example.start_position]
  if example.end_position < len(example.doc_tokens) - 1:
    end = orig_to_tok_index[example.end_position + 1] - 1
  else:
    end = len(all_doc_tokens) - 1
  return _improve_answer_span(all_doc_tokens, start, end, tokenizer, example.orig_answer_text)


def _question(query_tokens, context, vocab_lookup, cls_sep, max_seq_length: int) -> _Question:
  """The [CLS] question [SEP] part every window of a question shares, with its ids when the
  vocab gives them all (else None: convert_tokens_to_ids raises the tokenizer's own error)."""
  query_ids = None
  if context.doc_ids is not None:
    try:
      query_ids = [cls_sep[0]] + [vocab_lookup[t] for t in query_tokens] + [cls_sep[1]]
    except KeyError:
      query_ids = None
  query_part = ["[CLS]"] + query_tokens + ["[SEP]"]
  query_packed = None
  if query_ids is not None and 0 <= min(query_ids) and max(query_ids) < len(_varints()):
    query_packed = record_schema.pack_int64(query_ids, _varints())
  return _Question(query_part, query_ids, query_packed, cls_sep[1], max_seq_length)


def _convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride,
                                  max_query_length, is_training, output_fn, stats):
  words = _Words(tokenizer)
  vocab_lookup = getattr(tokenizer, "vocab", None)
  cls_sep = tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]"])
  unique_id = FIRST_UNIQUE_ID
  count = truncated = without_window = outside = 0
  context = None
  for example_index, example in enumerate(examples):
    query_tokens = tokenizer.tokenize(example.question_text)
    if len(query_tokens) > max_query_length:
      truncated += 1
      query_tokens = query_tokens[:max_query_length]
    max_tokens_for_doc = max_seq_length - len(query_tokens) - 3
    if max_tokens_for_doc <= 0:
      raise ValueError(
          f"max_seq_length={max_seq_length} leaves no room for the context of question "
          f"{example.qas_id!r} ({len(query_tokens)} question tokens + 3): raise max_seq_length "
          f"above max_query_length + 3 ({max_query_length + 3})")
    # The questions of one paragraph share its doc_tokens list (read_squad_examples): its
    # WordPieces, maps and ids are computed once for them all.
    if context is None or context.doc_tokens is not example.doc_tokens:
      context = _Context(example.doc_tokens, words)

    tok_start_position, tok_end_position = _answer_pieces(example, context, tokenizer,
                                                          is_training)

    spans, span_flags = context.windows(max_tokens_for_doc, doc_stride)
    if not spans:
      without_window += 1
    question = _question(query_tokens, context, vocab_lookup, cls_sep, max_seq_length)
    query_ids = question.ids
    doc_offset = len(question.tokens)
    for doc_span_index, span in enumerate(spans):
      start_position = end_position = None
      if is_training and not example.is_impossible:
        span_end = span.start + span.length
        if tok_start_position >= span.start and tok_end_position <= span_end - 1:
          start_position = tok_start_position - span.start + doc_offset
          end_position = tok_end_position - span.start + doc_offset
        else:
          start_position = end_position = 0
          outside += 1
      if is_training and example.is_impossible:
        start_position = end_position = 0

      feature = _Window(unique_id, example_index, doc_span_index, question, context.window(span),
                        span_flags[doc_span_index], start_position, end_position,
                        example.is_impossible)
      if query_ids is None:  # ids only from the tokenizer (which raises for a token it lacks)
        input_ids = tokenizer.convert_tokens_to_ids(feature.tokens)
        feature.input_ids = input_ids + [0] * (max_seq_length - len(input_ids))
      if example_index < 20:
        _log_feature(feature, example, is_training)
      output_fn(feature)
      unique_id += 1
      count += 1
  if stats is not None:
    stats.update(features=count, truncated_questions=truncated, without_window=without_window,
                 answer_outside=outside)
  if is_training and without_window and not count:
    # Said here, before any model is built: training on no window fails later as an
    # "End of sequence" graph error.
    raise SquadFormatError(
        f"no training window: the contexts of all {without_window} training question(s) have "
        "no WordPiece (empty, or only characters the tokenizer drops), so there is nothing to "
        "train on")
  return count


def _log_feature(feature: InputFeatures, example: SquadExample, is_training: bool) -> None:
  # A window's lazy fields are read without being kept.
  field = feature.peek if isinstance(feature, _Window) else functools.partial(getattr, feature)
  tokens = field("tokens")
  logging.info("*** Example ***")
  logging.info("unique_id: %s", feature.unique_id)
  logging.info("example_index: %s", feature.example_index)
  logging.info("doc_span_index: %s", feature.doc_span_index)
  logging.info("tokens: %s", " ".join(t for t in tokens))
  logging.info("token_to_orig_map: %s",
               " ".join(f"{k}:{v}" for k, v in field("token_to_orig_map").items()))
  logging.info("token_is_max_context: %s",
               " ".join(f"{k}:{v}" for k, v in field("token_is_max_context").items()))
  logging.info("input_ids: %s", " ".join(map(str, field("input_ids"))))
  logging.info("input_mask: %s", " ".join(map(str, field("input_mask"))))
  logging.info("segment_ids: %s", " ".join(map(str, field("segment_ids"))))
  if is_training and example.is_impossible:
    logging.info("impossible example")
  if is_training and not example.is_impossible:
    answer_text = " ".join(tokens[feature.start_position:feature.end_position + 1])
    logging.info("start_position: %d", feature.start_position)
    logging.info("end_position: %d", feature.end_position)
    logging.info("answer: %s", answer_text)


# === Records ===

# The record's features, written by serialize_feature and read through record_spec.
UNIQUE_IDS, START_POSITIONS, END_POSITIONS, IS_IMPOSSIBLE = (
    "unique_ids", "start_positions", "end_positions", "is_impossible")
SEQUENCE_FEATURES = (record_schema.INPUT_IDS, record_schema.INPUT_MASK,
                     record_schema.SEGMENT_IDS)


def record_spec(max_seq_length: int, is_training: bool
                ) -> Dict[str, Tuple[Tuple[int, ...], str]]:
  """The original run_squad.py's record schema, as {feature: (shape, dtype)} for the input
  pipeline's reader (input_pipeline.parsing_spec): unique_ids and the three sequences, plus
  start_positions and end_positions for training (is_impossible is written, not read)."""
  spec = {UNIQUE_IDS: ((), "int64")}
  spec.update((name, ((max_seq_length,), "int64")) for name in SEQUENCE_FEATURES)
  if is_training:
    spec.update({START_POSITIONS: ((), "int64"), END_POSITIONS: ((), "int64")})
  return spec


def serialize_feature(feature: InputFeatures, is_training: bool) -> bytes:
  """The tf.train.Example the original's FeatureWriter writes for one feature, serialised
  deterministically: unique_ids, input_ids, input_mask, segment_ids, and when training
  start_positions, end_positions and is_impossible (0/1), all int64."""
  varints = _varints()
  sequences = feature.packed_sequences() if isinstance(feature, _Window) else None
  if sequences is None:
    sequences = [record_schema.pack_int64(getattr(feature, name), varints)
                 for name in SEQUENCE_FEATURES]
  packed = dict(zip(SEQUENCE_FEATURES, sequences))
  packed[UNIQUE_IDS] = record_schema.pack_int64([feature.unique_id], varints)
  if is_training:
    packed[START_POSITIONS] = record_schema.pack_int64([feature.start_position], varints)
    packed[END_POSITIONS] = record_schema.pack_int64([feature.end_position], varints)
    packed[IS_IMPOSSIBLE] = b"\x01" if feature.is_impossible else b"\x00"
  return record_schema.serialize_packed_int64_example(packed)


@functools.lru_cache(maxsize=None)
def _varints() -> Sequence[bytes]:
  return record_schema.varint_table(1 << 17)  # every id of vocabularies up to 131k tokens


class FeatureWriter(record_schema.RecordFileWriter):
  """Writes InputFeatures to a TFRecord file (the original's FeatureWriter, same records).

  A context manager: the file appears under `filename` only when the block succeeds
  (record_schema.RecordFileWriter), so an interrupted conversion leaves no partial file.
  """

  def __init__(self, filename: str, is_training: bool):
    super().__init__(filename)
    self.is_training = is_training

  @property
  def num_features(self) -> int:
    return self.num_records

  def process_feature(self, feature: InputFeatures) -> None:
    self.write(serialize_feature(feature, self.is_training))

  __call__ = process_feature
