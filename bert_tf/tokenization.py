"""WordPiece tokenization with exactly the original BERT release's behaviour (pure Python).

Character classes are defined once here; the in-graph tokenizer (bert_tf/text.py) compiles its
regular expressions from the same predicates, so both paths agree on what is punctuation, control,
whitespace or CJK under this Python's Unicode database.
"""

import collections
import functools
import itertools
import re
import sys
import unicodedata
from typing import Any, Callable, Iterable, List, Mapping, Sequence, Tuple

from bert_tf import io
from bert_tf import unicode_tables

# === Character classes (the original tokenization.py: _is_whitespace, _is_control,
# _is_punctuation, BasicTokenizer._is_chinese_char) ===

# Code point blocks the original treats as CJK ideographs: each becomes a word of its own.
# Hangul, Hiragana and Katakana are deliberately absent (the original leaves them to whitespace).
CJK_RANGES: Tuple[Tuple[int, int], ...] = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def is_cjk_codepoint(cp: int) -> bool:
  return any(lo <= cp <= hi for lo, hi in CJK_RANGES)


def is_whitespace(char: str) -> bool:
  """Space, tab, newline, carriage return and category Zs count as whitespace when cleaning."""
  if char in (" ", "\t", "\n", "\r"):
    return True
  return unicodedata.category(char) == "Zs"


def is_control(char: str) -> bool:
  """Categories Cc and Cf are control characters, except tab/newline/CR (those are whitespace)."""
  if char in ("\t", "\n", "\r"):
    return False
  return unicodedata.category(char) in ("Cc", "Cf")


def is_punctuation(char: str) -> bool:
  """All non-letter/number ASCII symbols plus every Unicode P* category.

  ASCII characters such as "^", "$" and "`" are not Unicode punctuation, but the original splits
  them off too, for consistency.
  """
  cp = ord(char)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(char).startswith("P")


def is_removed_when_cleaning(char: str) -> bool:
  """NUL, U+FFFD (the replacement character) and control characters are deleted."""
  return char in ("\x00", "\ufffd") or is_control(char)


def is_mark_nonspacing(char: str) -> bool:
  """Category Mn: what accent stripping drops after NFD."""
  return unicodedata.category(char) == "Mn"


@functools.lru_cache(maxsize=None)
def codepoint_ranges(predicate: Callable[[str], bool]) -> Tuple[Tuple[int, int], ...]:
  """All code points (surrogates excluded) where predicate holds, as inclusive (lo, hi) ranges.

  What scan_codepoints(predicate) gives, cached; for the tokenizers' own predicates under the
  Unicode version of bert_tf/unicode_tables.py, that table (a scan costs about half a second per
  predicate; tests/test_unicode_tables.py checks that the tables equal the scans). Used to build
  regular expressions that match exactly the characters the predicate accepts.
  """
  key = f"{predicate.__module__}.{predicate.__qualname__}"
  if (unicodedata.unidata_version == unicode_tables.UNIDATA_VERSION and
      sys.maxunicode == unicode_tables.MAXUNICODE and key in unicode_tables.RANGES):
    return unicode_tables.RANGES[key]
  return scan_codepoints(predicate)


def scan_codepoints(predicate: Callable[[str], bool]) -> Tuple[Tuple[int, int], ...]:
  """codepoint_ranges from this Python's Unicode database: the predicate asked of every code
  point."""
  ranges: List[Tuple[int, int]] = []
  start = None
  for cp in range(sys.maxunicode + 1):
    inside = not 0xD800 <= cp <= 0xDFFF and predicate(chr(cp))
    if inside and start is None:
      start = cp
    elif not inside and start is not None:
      ranges.append((start, cp - 1))
      start = None
  if start is not None:
    ranges.append((start, sys.maxunicode))
  return tuple(ranges)


# === Text normalisation helpers ===


def convert_to_unicode(text) -> str:
  """Returns `text` as a str, decoding bytes as UTF-8.

  Unlike the original release, which decoded with errors="ignore" and so silently dropped invalid
  bytes (changing the tokens without a word), invalid UTF-8 is an error here: corrupt input should
  be found, not trained on.

  Args:
    text: a str (returned unchanged) or bytes/bytearray holding UTF-8.

  Returns:
    The text as a str.

  Raises:
    ValueError: bytes that are not valid UTF-8 (the message gives the byte offset), or a value
      that is neither str nor bytes.
  """
  if isinstance(text, str):
    return text
  if isinstance(text, (bytes, bytearray)):
    try:
      return bytes(text).decode("utf-8")
    except UnicodeDecodeError as e:
      raise ValueError(
          f"Invalid UTF-8 at byte offset {e.start} ({bytes(text[e.start:e.end])!r}: {e.reason}) "
          f"in text starting {bytes(text[:40])!r}") from None
  raise ValueError(f"Unsupported string type {type(text).__name__}: expected str or bytes")


def whitespace_tokenize(text: str) -> List[str]:
  """Splits on whitespace as str.split() defines it (Unicode White_Space-like, incl. U+2028/9)."""
  return text.split()


def convert_by_vocab(vocab: Mapping, items: Iterable) -> list:
  """Maps every item through `vocab` (token -> id or id -> token).

  Raises:
    KeyError: naming the first item that `vocab` lacks.
  """
  try:
    return [vocab[item] for item in items]
  except KeyError as e:
    raise KeyError(f"{e.args[0]!r} is not in the vocabulary") from None


# === Vocabulary ===

# Every BERT vocab carries these; the data pipeline and the heads rely on their ids.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def _read_bytes(path: str) -> bytes:
  """Reads a whole file (bert_tf.io: TensorFlow only for gs://, ram://, ... paths).

  Tokenization runs in data-preparation worker processes that never need TensorFlow.
  """
  if not io.is_local(path) and not io.exists(path):
    raise FileNotFoundError(f"Vocab file not found: {path}")
  try:
    with io.open_file(path, "rb") as f:
      return f.read()
  except FileNotFoundError:
    raise FileNotFoundError(f"Vocab file not found: {path}") from None
  except IsADirectoryError:
    raise FileNotFoundError(
        f"Vocab file {path} is a directory without a vocab.txt in it: give the WordPiece vocab "
        "file (one token a line; a Hugging Face folder saved with tokenizer.json alone has "
        "none)") from None


def load_vocab(vocab_file: str) -> "collections.OrderedDict[str, int]":
  """Reads a WordPiece vocab: one token per line, stripped; a token's id is its 0-based line number.

  As in the original, an empty line in the middle of the file is the token "" with its own id
  (it can never match a word piece, but it keeps later ids aligned with line numbers). Lines end
  at "\\n" only, so a stray "\\r" or U+2028 inside a line does not shift ids.

  Args:
    vocab_file: local path, or any tf.io.gfile path such as gs://bucket/vocab.txt.

  Returns:
    An OrderedDict token -> id, in file order.

  Raises:
    FileNotFoundError: the file does not exist.
    ValueError: invalid UTF-8 (file and line named), a duplicated token (both lines named; the
      original silently kept the later id), or missing special tokens.
  """
  data = _read_bytes(vocab_file)
  lines = data.split(b"\n")
  if lines and lines[-1] == b"":
    lines.pop()  # The final newline ends the last line; it does not start a new token.
  vocab = collections.OrderedDict()
  for index, raw in enumerate(lines):
    try:
      token = raw.decode("utf-8").strip()
    except UnicodeDecodeError as e:
      raise ValueError(
          f"{vocab_file}:{index + 1}: invalid UTF-8 at byte {e.start} of the line "
          f"({raw[e.start:e.end]!r}: {e.reason})") from None
    if token in vocab:
      if not token:
        raise ValueError(
            f"{vocab_file}: lines {vocab[token] + 1} and {index + 1} are both blank; a vocab "
            "may hold one blank line (the token \"\", which no text produces). Give each other "
            f"blank line a token of its own, such as [blank{index + 1}], rather than deleting "
            "it, so that the ids of the lines after it stay what the model was trained with")
      raise ValueError(
          f"{vocab_file}: duplicate token {token!r} on lines {vocab[token] + 1} and {index + 1}")
    vocab[token] = index
  missing = [t for t in SPECIAL_TOKENS if t not in vocab]
  if missing:
    bom = (" (the file starts with a UTF-8 byte-order mark, which becomes part of its first "
           "token: save it without one)" if data.startswith(b"\xef\xbb\xbf") else "")
    raise ValueError(
        f"{vocab_file}: vocab lacks the special token(s) {', '.join(missing)} "
        f"({len(vocab)} tokens read); a BERT vocab needs all of {', '.join(SPECIAL_TOKENS)}"
        f"{bom}")
  return vocab


def id_count(vocab: Mapping[str, int]) -> int:
  """How many ids a tokenizer of `vocab` (load_vocab's) can produce, the number a model's
  vocab_size must hold: its lines, less a blank last line (the token "", which no text ever
  produces; the original reads such a vocab too)."""
  count = len(vocab)
  return count - 1 if count and vocab.get("") == count - 1 else count


# === Compiled patterns ===


def _char_class(ranges: Iterable[Tuple[int, int]]) -> str:
  """A regex character class body matching exactly the given inclusive code point ranges."""
  parts = []
  for lo, hi in ranges:
    parts.append(f"\\U{lo:08x}" if lo == hi else f"\\U{lo:08x}-\\U{hi:08x}")
  return "".join(parts)


def _one_of(class_body: str) -> str:
  """A regex for one character of the class; one that never matches if the class is empty."""
  return f"[{class_body}]" if class_body else "(?!)"


def _clip(ranges: Iterable[Tuple[int, int]], limit: int) -> List[Tuple[int, int]]:
  """The part of `ranges` at or below code point `limit`."""
  return [(lo, min(hi, limit)) for lo, hi in ranges if lo <= limit]


class _LinePatterns:
  """The regular expressions one line needs, for lines whose characters are all <= `limit`.

  Python's re matches a character class in constant time only below U+10000: ranges above it are
  tried one by one, and the classes here have up to ~150 of them, which made non-ASCII text slower
  than the per-character original. Lines without such characters (nearly all) therefore use
  classes cut off at U+FFFF; the full classes stay exact for the rest.
  """

  def __init__(self, limit: int):
    removed = _char_class(_clip(codepoint_ranges(is_removed_when_cleaning), limit))
    marks = _char_class(_clip(codepoint_ranges(is_mark_nonspacing), limit))
    punct = _char_class(_clip(codepoint_ranges(is_punctuation), limit))
    cjk = _char_class(_clip(CJK_RANGES, limit))
    self.removed = re.compile(_one_of(removed) + "+")
    self.nonspacing_marks = re.compile(_one_of(marks) + "+")
    self.punctuation = re.compile(_one_of(punct))
    self.cjk = re.compile(_one_of(cjk))
    # Words are single punctuation or CJK characters, or runs of anything else except whitespace.
    # Python's \s for str patterns is exactly str.isspace(), i.e. what str.split() (the original's
    # whitespace_tokenize) splits on. Matching CJK characters singly here replaces the original's
    # spaces around them; that is exact because no CJK character is cased or case-ignorable (so
    # final-sigma lower-casing sees the same context), all are NFD starters, and lower-casing plus
    # NFD neither creates CJK characters from others nor turns one into anything but one CJK
    # character (checked over all of Unicode in the tests).
    self.words = re.compile(f"[{punct}{cjk}]|[^{punct}{cjk}\\s]+")
    # The same words, and every newline (tokenize_joined's TEXT_BREAK) as a word of its own.
    self.words_and_breaks = re.compile(f"[{punct}{cjk}]|[^{punct}{cjk}\\s]+|\n")


class _Patterns:
  """Regular expressions compiled from the character-class predicates above.

  Each whole-line operation below replaces one of the original's per-character Python loops; the
  classes come from codepoint_ranges(), so they agree with the predicates code point by code point.
  """

  def __init__(self):
    self.ascii = _LinePatterns(0x7F)
    self.bmp = _LinePatterns(0xFFFF)
    self.full = _LinePatterns(sys.maxunicode)


@functools.lru_cache(maxsize=None)
def _patterns() -> _Patterns:
  # Built on first use: computing the classes scans all of Unicode, which importing this
  # module for load_vocab alone should not pay.
  return _Patterns()


# === Tokenizers ===


# What tokenize_joined puts after each text but the last: whitespace, so never a word.
TEXT_BREAK = "\n"


class BasicTokenizer:
  """Cleaning, CJK splitting, optional lower-casing with accent stripping, punctuation splitting.

  Produces exactly the original's tokens. The original walks every character in Python; this
  class does each step on the whole line with C-level string methods and precompiled regular
  expressions, which gives the same result because every step either works per character or, for
  str.lower() (final sigma) and NFD (canonical reordering), never looks across whitespace.
  """

  def __init__(self, do_lower_case: bool = True):
    self.do_lower_case = do_lower_case
    self._p = _patterns()

  def tokenize(self, text) -> List[str]:
    """Splits `text` (str or UTF-8 bytes) into words and punctuation characters."""
    if type(text) is not str:  # pylint: disable=unidiomatic-typecheck
      text = convert_to_unicode(text)
    if text.isalnum() and text.isascii():
      # One run of ASCII letters and digits (most words of running text, which callers that
      # tokenize word by word pass one at a time): nothing to clean, split or strip.
      return [text.lower() if self.do_lower_case else text]
    p = self._p
    if text.isascii():
      # ASCII has no CJK, no marks and is its own NFD, so only cleaning and lower() remain.
      if not text.isprintable():
        text = p.ascii.removed.sub("", text)
      if self.do_lower_case:
        text = text.lower()
      return p.ascii.words.findall(text)
    # Cleaning only deletes: the original's mapping of tabs, newlines and Zs to " " is not needed,
    # since every one of them is str.isspace() and so already separates words below.
    text = (p.bmp if max(text) <= "\uffff" else p.full).removed.sub("", text)
    if self.do_lower_case:
      # Same order as the original: lower-case, then decompose, then drop the accents.
      text = unicodedata.normalize("NFD", text.lower())
      # Asked again: NFD takes a few CJK compatibility ideographs (U+FA6C...) above U+FFFF.
      line = p.bmp if max(text, default="") <= "\uffff" else p.full
      text = line.nonspacing_marks.sub("", text)
    else:
      line = p.bmp if max(text, default="") <= "\uffff" else p.full
    return line.words.findall(text)


  def tokenize_joined(self, texts: Sequence) -> List[str]:
    """tokenize() of every text, concatenated, with TEXT_BREAK between one text's words and the
    next's (len(texts) - 1 breaks).

    ASCII texts (nearly all English) take one regular expression pass for the whole batch
    instead of one call per text; the words are the same, since every step works per character
    and TEXT_BREAK, like every whitespace, only separates words.
    """
    try:
      joined = TEXT_BREAK.join(texts)
    except TypeError:  # bytes among the texts
      texts = [convert_to_unicode(text) for text in texts]
      joined = TEXT_BREAK.join(texts)
    if not joined.isascii():
      words = []
      for text in texts:
        words += self.tokenize(text)
        words.append(TEXT_BREAK)
      if words:
        words.pop()
      return words
    if joined.count(TEXT_BREAK) != len(texts) - 1:  # a text has newlines of its own
      joined = TEXT_BREAK.join(text.replace(TEXT_BREAK, " ") for text in texts)
    if not all(map(str.isprintable, texts)):
      # Deleting control characters (never TEXT_BREAK) per line or on the whole is the same.
      joined = self._p.ascii.removed.sub("", joined)
    if self.do_lower_case:
      joined = joined.lower()
    return self._p.ascii.words_and_breaks.findall(joined)


class WordCache(dict):
  """word -> compute(word) (its word pieces, ids, ...), computed on a miss; emptied when it grows
  past max_size."""

  def __init__(self, compute: Callable[[str], Any], max_size: int):
    super().__init__()
    self._compute = compute
    self._max_size = max_size

  def __missing__(self, word: str) -> Any:
    if len(self) >= self._max_size:
      self.clear()  # Crude but O(1) per word on average; a corpus's frequent words come back fast.
    value = self[word] = self._compute(word)
    return value


# Distinct words remembered per tokenizer (~150 bytes each): enough for the vocabulary of tens of
# MB of text, small enough for many worker processes.
DEFAULT_CACHE_SIZE = 500_000


class WordpieceTokenizer:
  """Greedy longest-match-first WordPiece; continuation pieces carry a "##" prefix."""

  def __init__(self, vocab: Mapping[str, int], unk_token: str = "[UNK]",
               max_input_chars_per_word: int = 200, cache_size: int = DEFAULT_CACHE_SIZE):
    """Creates the tokenizer.

    Args:
      vocab: token -> id. Read once here for the longest token, so do not mutate it later.
      unk_token: what a word becomes when some part of it matches no vocab entry.
      max_input_chars_per_word: longer words (in code points) become unk_token whole.
      cache_size: how many distinct words to remember the pieces of.
    """
    self.vocab = vocab
    self.unk_token = unk_token
    self.max_input_chars_per_word = max_input_chars_per_word
    # No piece longer than the longest vocab entry can match, so the search starts there rather
    # than at the end of the word (same result, linear instead of quadratic in the word length).
    self._longest = max((len(t) for t in vocab), default=0)
    self._pieces = WordCache(self._word_to_pieces, cache_size)
    self._ids = WordCache(self.word_ids, cache_size)

  def _word_to_pieces(self, word: str) -> Tuple[str, ...]:
    n = len(word)
    if n > self.max_input_chars_per_word:
      return (self.unk_token,)
    vocab = self.vocab
    longest = self._longest
    pieces = []
    start = 0
    while start < n:
      end = min(n, start + longest)
      while end > start:
        piece = word[start:end] if start == 0 else "##" + word[start:end]
        if piece in vocab:
          break
        end -= 1
      else:
        return (self.unk_token,)
      pieces.append(piece)
      start = end
    return tuple(pieces)

  def word_pieces(self, word: str) -> Tuple[str, ...]:
    """The word pieces of one word (cached)."""
    return self._pieces[word]

  def word_ids(self, word: str) -> Tuple[int, ...]:
    """Ids of the word pieces of one word (computed, not cached: for callers with a cache)."""
    # A word that is itself a vocab entry is its own only piece: the search's first try is the
    # whole word whenever it is no longer than the longest entry, which every entry is. (An
    # empty word has no pieces, even when the vocab has an empty line.)
    if word and len(word) <= self.max_input_chars_per_word:
      whole = self.vocab.get(word)
      if whole is not None:
        return (whole,)
    # Not through self._pieces: a tokenizer used only for ids should hold only the ids cache.
    return tuple(convert_by_vocab(self.vocab, self._word_to_pieces(word)))

  def tokenize(self, text) -> List[str]:
    """Word pieces of the whitespace-separated words of `text` (normally BasicTokenizer output)."""
    return self.tokenize_words(whitespace_tokenize(convert_to_unicode(text)))

  def tokenize_words(self, words: Iterable[str]) -> List[str]:
    """Word pieces of already separated words, concatenated."""
    return list(itertools.chain.from_iterable(map(self._pieces.__getitem__, words)))

  def tokenize_words_to_ids(self, words: Iterable[str]) -> List[int]:
    """Ids of the word pieces of already separated words, concatenated."""
    return list(itertools.chain.from_iterable(map(self._ids.__getitem__, words)))


class FullTokenizer:
  """Text -> WordPiece tokens and ids, exactly like the original release's FullTokenizer."""

  def __init__(self, vocab_file: str, do_lower_case: bool = True):
    """Loads the vocab (see load_vocab for the errors) and builds both tokenizer stages.

    Args:
      vocab_file: path to the vocab, one token per line.
      do_lower_case: True for uncased models (lower-case and strip accents), False for cased.
    """
    self.vocab = load_vocab(vocab_file)
    self.inv_vocab = {v: k for k, v in self.vocab.items()}
    self.do_lower_case = do_lower_case
    self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
    self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)

  def tokenize(self, text) -> List[str]:
    """Word pieces of `text` (str or UTF-8 bytes)."""
    return self.wordpiece_tokenizer.tokenize_words(self.basic_tokenizer.tokenize(text))

  def tokenize_word(self, word: str) -> Sequence[str]:
    """tokenize(word) for one whitespace-free str, as a sequence (a cached tuple for a word of
    ASCII letters and digits, whose only basic word is itself, lower-cased when uncased)."""
    if word.isalnum() and word.isascii():
      return self.wordpiece_tokenizer.word_pieces(word.lower() if self.do_lower_case else word)
    return self.tokenize(word)

  def tokenize_to_ids(self, text) -> List[int]:
    """Ids of tokenize(text); faster than converting afterwards, as ids are cached per word."""
    return self.wordpiece_tokenizer.tokenize_words_to_ids(self.basic_tokenizer.tokenize(text))

  def convert_tokens_to_ids(self, tokens: Iterable[str]) -> List[int]:
    """Raises KeyError naming the first token missing from the vocab."""
    return convert_by_vocab(self.vocab, tokens)

  def convert_ids_to_tokens(self, ids: Iterable[int]) -> List[str]:
    """Raises KeyError naming the first id outside the vocab."""
    try:
      return [self.inv_vocab[i] for i in ids]
    except KeyError as e:
      raise KeyError(
          f"token id {e.args[0]!r} is not in the vocabulary (ids 0..{len(self.inv_vocab) - 1})"
      ) from None
