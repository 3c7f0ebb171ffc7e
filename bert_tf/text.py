"""In-graph BERT tokenization: TensorFlow and tensorflow-text ops only, same ids as the reference.

`InGraphTokenizer` turns a batch of UTF-8 strings into WordPiece ids inside the TensorFlow graph,
so it runs in a `tf.function`, a `tf.data` pipeline or a SavedModel served without Python (TF
Serving links core TF ops and tensorflow-text ops, which is all this uses). Its ids equal
`bert_tf.tokenization.FullTokenizer(...).tokenize_to_ids(text)` (the original tokenization.py:
FullTokenizer, BasicTokenizer and WordpieceTokenizer).

Why not tensorflow-text's BertTokenizer / FastBertTokenizer: they case-fold with NFKC (ﬁ -> fi,
² -> 2), treat control characters as spaces (the original deletes them) and limit words to 100
bytes (the original: 200 characters). So the pipeline is assembled here from primitives, with
every character class compiled from the predicates in `bert_tf.tokenization`:

  1. clean:  delete NUL, U+FFFD, Cc and Cf (not \\t \\n \\r)
  2. lower:  (do_lower_case only) ICU lower-casing, corrected where it disagrees with Python,
             then NFD and deletion of category Mn
  3. space:  whitespace (\\t \\n \\r, Zs, and what str.split() splits on) becomes " ", and a
             space goes on each side of every CJK ideograph and punctuation character
  4. split:  tf.strings.split on " "
  5. WordPiece: tensorflow-text FastWordpieceTokenizer (greedy longest-match-first, the same
             result as the original's), and words over 200 characters forced to [UNK]
The original spaces out CJK before lower-casing; `InGraphTokenizer._split_words` says why the
order here gives the same words. A batch whose texts are all ASCII skips the Unicode passes of
steps 1 and 2 (invalid-UTF-8 dropping, ICU lower-casing and its fixes, NFD, mark deletion), which
change nothing there; tests hold the two paths to the same ids.

Unicode versions. Python 3.11 uses Unicode 14.0; TensorFlow 2.20's `tf.strings.lower` knows an
older version and tensorflow-text's NFD a newer one. Differences found by comparing every code
point (see `lowercase_mismatches` and `NFD_KNOWN_DIFFERENCES`):
  * lower-casing: 40 capitals new in Unicode 14 (U+2C2F, U+A7C0, U+A7D0, U+A7D6, U+A7D8 and
    the Vithkuqi capitals U+10570..U+10595) are left unchanged by TensorFlow. They are found at
    construction time and corrected in-graph, so ids still match.
  * NFD: 20 code points unassigned in Unicode 14 (U+105C9, U+105E4, U+11383, U+11385, U+1138E,
    U+11391, U+113C5, U+113C7, U+113C8, U+16121..U+16128, U+16D68..U+16D6A) are decomposed by
    tensorflow-text but not by Python. The decomposed text differs, but every resulting
    character is also unassigned in Unicode 14, so the word they are in is [UNK] either way and
    the ids agree (only the intermediate words from `split_words` differ).
  * Final sigma (the one known difference in ids): both lower a word-final capital sigma to
    "ς", but decide "word-final" from their own Unicode version's cased / case-ignorable
    properties. 301 characters new in Unicode 14 (`FINAL_SIGMA_KNOWN_DIFFERENCES`: Vithkuqi,
    Latin Extended-F/G, Glagolitic U+2C2F/U+2C5F, new combining marks such as U+0898..U+089F
    ...) have those properties in Python but not in TensorFlow's ICU, so a Σ next to one of
    them (e.g. "\U00010570Σ") can lower to "σ" instead of "ς" and give a different id. Text
    without both a capital sigma and one of those characters is unaffected.

Locale: `tf.strings.lower` follows the process's ICU default locale (LANG / LC_ALL), and in a
Turkish or Azeri locale lowers "I" to dotless "ı". The graph maps "I" to "i" first, so ids do not
depend on the locale the tokenizer (or a SavedModel holding it) runs under.

Input strings must be valid UTF-8 (as every `str` encoded by TensorFlow is); with
`drop_invalid_utf8=True` invalid bytes are dropped first, like the original release's
`decode("utf-8", "ignore")` (our reference FullTokenizer raises on them instead).
"""

import concurrent.futures
import functools
import os
import sys
from typing import Iterable, List, Optional, Sequence, Tuple, Union

import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf import tokenization

# The original's max_input_chars_per_word.
MAX_CHARS_PER_WORD = 200

# Code points that tensorflow-text 2.20's NFD decomposes but Python 3.11 (Unicode 14.0) does not.
# They do not change ids (see the module docstring); tests pin this list.
NFD_KNOWN_DIFFERENCES: Tuple[int, ...] = (
    0x105C9, 0x105E4, 0x11383, 0x11385, 0x1138E, 0x11391, 0x113C5, 0x113C7, 0x113C8,
    0x16121, 0x16122, 0x16123, 0x16124, 0x16125, 0x16126, 0x16127, 0x16128,
    0x16D68, 0x16D69, 0x16D6A,
)


# Characters whose cased / case-ignorable properties differ between Python 3.11 (Unicode 14.0)
# and tf.strings.lower's ICU, as inclusive ranges: next to a capital sigma they change whether it
# lower-cases to the final form. Found by lower-casing "ΑΣx", "xΣ" and "ΑxΣ" for every code
# point x with both; tests pin this list.
FINAL_SIGMA_KNOWN_DIFFERENCES: Tuple[Tuple[int, int], ...] = (
    (0x888, 0x888), (0x898, 0x89F), (0x8C9, 0x8D2), (0xC3C, 0xC3C), (0x1734, 0x1734),
    (0x180F, 0x180F), (0x1AC1, 0x1ACE), (0x1DFA, 0x1DFA), (0x2C2F, 0x2C2F), (0x2C5F, 0x2C5F),
    (0xA7C0, 0xA7C1), (0xA7D0, 0xA7D1), (0xA7D3, 0xA7D3), (0xA7D5, 0xA7D9), (0xA7F2, 0xA7F4),
    (0xFBC2, 0xFBC2), (0x10570, 0x1057A), (0x1057C, 0x1058A), (0x1058C, 0x10592),
    (0x10594, 0x10595), (0x10597, 0x105A1), (0x105A3, 0x105B1), (0x105B3, 0x105B9),
    (0x105BB, 0x105BC), (0x10780, 0x10785), (0x10787, 0x107B0), (0x107B2, 0x107BA),
    (0x10F82, 0x10F85), (0x11070, 0x11070), (0x11073, 0x11074), (0x110C2, 0x110C2),
    (0x1AFF0, 0x1AFF3), (0x1AFF5, 0x1AFFB), (0x1AFFD, 0x1AFFE), (0x1CF00, 0x1CF2D),
    (0x1CF30, 0x1CF46), (0x1DF00, 0x1DF09), (0x1DF0B, 0x1DF1E), (0x1E2AE, 0x1E2AE),
)


# === Character classes as RE2 patterns ===


def _re2_char(cp: int) -> str:
  return "\\x{%X}" % cp


def re2_class(ranges: Iterable[Tuple[int, int]]) -> str:
  """An RE2 character class matching exactly the given inclusive code point ranges."""
  parts = []
  for lo, hi in ranges:
    parts.append(_re2_char(lo) if lo == hi else _re2_char(lo) + "-" + _re2_char(hi))
  return "[" + "".join(parts) + "]"


def is_python_space(char: str) -> bool:
  # What str.split() splits on: after cleaning this is " ", U+2028 and U+2029 in practice.
  return char.isspace()


def _without_space(ranges: Iterable[Tuple[int, int]]) -> List[Tuple[int, int]]:
  """The ranges minus U+0020."""
  result = []
  for lo, hi in ranges:
    if lo <= 0x20 <= hi:
      result.extend(r for r in ((lo, 0x1F), (0x21, hi)) if r[0] <= r[1])
    else:
      result.append((lo, hi))
  return result


@functools.lru_cache(maxsize=None)
def _patterns() -> dict:
  """RE2 patterns for each step, built once per process from the reference predicates."""
  t = tokenization
  remove = re2_class(t.codepoint_ranges(t.is_removed_when_cleaning))
  mark = re2_class(t.codepoint_ranges(t.is_mark_nonspacing))
  # Characters that become a word of their own: CJK ideographs and punctuation.
  alone = re2_class(sorted(t.codepoint_ranges(t.is_punctuation) + tuple(t.CJK_RANGES)))
  # Cleaning's whitespace (\t \n \r, Zs) plus what str.split() also splits on (U+2028 ...).
  # " " itself is left out: rewriting every space to itself costs more than all other steps.
  space = re2_class(_without_space(sorted(t.codepoint_ranges(t.is_whitespace) +
                                          t.codepoint_ranges(is_python_space))))
  return {
      "remove": remove,
      "mark": mark,
      # Spaces around lone characters and every other space turned into " ", so that
      # tf.strings.split (ASCII whitespace) gives the words. Two patterns without capture
      # groups are faster than one with a group: RE2 then finds matches with its DFA alone.
      "alone": alone,
      "space": space,
  }


def _untailor(text: str) -> str:
  # tf.strings.lower follows ICU's default locale, taken from LANG / LC_ALL: under a Turkish or
  # Azeri locale it lowers "I" to dotless "ı". The other locale tailorings (Lithuanian dots,
  # Turkish "İ") only add or remove combining marks, which accent stripping deletes anyway. So
  # "I" goes to "i" before ICU sees it, and a SavedModel gives the same ids in every locale.
  return text.replace("I", "i")


_SEPARATOR = "\x01"  # lowercase_mismatches' separator, a character cleaning deletes


@functools.lru_cache(maxsize=None)
def lowercase_mismatches() -> Tuple[Tuple[str, str], ...]:
  """Characters whose `tf.strings.lower` differs from Python's `str.lower`, with Python's result.

  Every code point is compared once per process, except those the cleaning step deletes (lower-
  casing never sees them). Each side lower-cases all of them in one call, as one string with
  U+0001 between the characters: a control character is neither cased nor case-ignorable, so no
  character's lower case depends on its neighbours there (final sigma and the locale rules see it
  alone, as in a one-character string), and cleaning deletes it, so it is never one of the
  characters compared. (Not NUL: tf.strings.lower stops at the first NUL.)

  Returns:
    (character, python_lowercase) pairs, in code point order.
  """
  excluded = sorted(tokenization.codepoint_ranges(tokenization.is_removed_when_cleaning) +
                    ((0xD800, 0xDFFF),))
  chars, start = [], 0
  for lo, hi in excluded:
    chars.extend(map(chr, range(start, lo)))
    start = hi + 1
  chars.extend(map(chr, range(start, sys.maxunicode + 1)))
  joined = _SEPARATOR.join(chars)
  python_lower = joined.lower().split(_SEPARATOR)
  icu_lower = tf.strings.lower(_untailor(joined), encoding="utf-8").numpy().decode(
      "utf-8").split(_SEPARATOR)
  if not len(chars) == len(python_lower) == len(icu_lower):
    raise ValueError("lower-casing changed the number of U+0001 separators: cannot compare "
                     "tf.strings.lower with str.lower character by character")
  mismatches = [(char, py) for char, py, icu in zip(chars, python_lower, icu_lower) if py != icu]
  # The fix-up replaces each character by Python's lower case before ICU lower-casing runs, so
  # ICU must leave those replacements alone.
  if mismatches:
    targets = [target for _, target in mismatches]
    again = tf.strings.lower(tf.constant(targets), encoding="utf-8").numpy()
    for (char, target), twice in zip(mismatches, again):
      if twice.decode("utf-8") != target:
        raise ValueError(
            "Cannot correct tf.strings.lower for U+%04X: it changes Python's lower case %r "
            "again to %r" % (ord(char), target, twice.decode("utf-8")))
  return tuple(mismatches)


# === Vocabulary ===


def _vocab_list(vocab: Union[str, Sequence[str]]) -> List[str]:
  """The vocab as a list whose position i holds the token with id i.

  A vocab file is read by the reference `load_vocab`, so both paths assign the same ids. Where a
  token appears twice, the reference keeps the later line's id; FastWordpieceTokenizer needs
  unique tokens, so earlier duplicates (and the reference's stripped empty lines) are replaced by
  placeholders containing a space, which no word can contain and so never match.
  """
  if isinstance(vocab, str):
    token_to_id = tokenization.load_vocab(vocab)
  else:
    token_to_id = {}
    for index, token in enumerate(vocab):
      token_to_id[token] = index
  size = max(token_to_id.values()) + 1 if token_to_id else 0
  tokens = [" <unused id %d>" % i for i in range(size)]
  for token, index in token_to_id.items():
    if token:
      tokens[index] = token
  return tokens


# === The tokenizer ===


def split_on_spaces(text: tf.Tensor) -> tf.RaggedTensor:
  """tf.strings.split(text) of [batch] strings: the words between ASCII whitespace,
  [batch, (words)].

  The same op splits; the row splits come from one LowerBound over the words' row numbers,
  where tf.strings.split builds them with a dozen ops (a bincount, a cumsum and their checks),
  each of which a served request pays for.
  """
  split = tf.raw_ops.StringSplitV2(input=text, sep="")
  rows = tf.range(tf.size(text, out_type=tf.int64) + 1)
  row_splits = tf.raw_ops.LowerBound(sorted_inputs=split.indices[tf.newaxis, :, 0],
                                     values=rows[tf.newaxis], out_type=tf.int64)[0]
  return tf.RaggedTensor.from_row_splits(split.values, row_splits, validate=False)


class InGraphTokenizer(tf.Module):
  """BERT WordPiece tokenization made of TensorFlow ops, equal to the reference FullTokenizer.

  Usage:
    tokenizer = InGraphTokenizer("vocab.txt", do_lower_case=True)
    ids = tokenizer.tokenize(tf.constant(["Hello, world!"]))   # RaggedTensor [batch, (pieces)]
    tokenizer.tokenize_lines(["Hello, world!"])                  # [[7592, 1010, 2088, 999]]
  """

  # tf.Module's variables, trainable_variables and submodules walk every attribute, and
  # tf.saved_model.save reads them on each module it saves: they skip the vocabulary's tens
  # of thousands of entries.
  _TF_MODULE_IGNORED_PROPERTIES = tf.Module._TF_MODULE_IGNORED_PROPERTIES | {
      "vocab", "_token_to_id"}

  def __init__(self,
               vocab: Union[str, Sequence[str]],
               do_lower_case: bool = True,
               out_type: tf.DType = tf.int32,
               drop_invalid_utf8: bool = False,
               name: Optional[str] = None):
    """Builds the tokenizer.

    Args:
      vocab: path of a vocab file (one token per line, id = line number; any tf.io.gfile path),
        or the tokens in id order.
      do_lower_case: lower-case and strip accents, like the original's flag.
      out_type: tf.int32 or tf.int64 ids.
      drop_invalid_utf8: drop bytes that are not valid UTF-8 before tokenizing (costs one more
        pass over the text); otherwise the input must be valid UTF-8 (a word holding invalid
        bytes comes out as [UNK] in practice, but that is not guaranteed).
      name: module name.
    """
    super().__init__(name=name)
    if out_type not in (tf.int32, tf.int64):
      raise ValueError("out_type must be tf.int32 or tf.int64, got %r" % (out_type,))
    self.do_lower_case = bool(do_lower_case)
    self.out_type = out_type
    self.drop_invalid_utf8 = bool(drop_invalid_utf8)
    # Plain Python data, kept out of TensorFlow's object tracking (see
    # _TF_MODULE_IGNORED_PROPERTIES): a list or dict attribute would be wrapped and tracked.
    self.vocab = self._no_dependency(_vocab_list(vocab))
    self._token_to_id = self._no_dependency({token: i for i, token in enumerate(self.vocab)})
    if "[UNK]" not in self._token_to_id:
      raise ValueError("The vocab %s has no [UNK] token" %
                       (vocab if isinstance(vocab, str) else "list"))
    self.unk_id = self._token_to_id["[UNK]"]
    self.pad_id = self._token_to_id.get("[PAD]")
    self.cls_id = self._token_to_id.get("[CLS]")
    self.sep_id = self._token_to_id.get("[SEP]")
    self.mask_id = self._token_to_id.get("[MASK]")

    self._patterns = _patterns()
    self._lower_fixes = lowercase_mismatches() if self.do_lower_case else ()
    if self._lower_fixes:
      self._lower_fix_detect = re2_class(
          [(ord(c), ord(c)) for c, _ in self._lower_fixes])
    # A word of more than MAX_CHARS_PER_WORD characters is [UNK] whatever it holds, and it has at
    # least that many bytes, so the byte limit (4 bytes per character at most) never decides.
    self._wordpiece = tf_text.FastWordpieceTokenizer(
        vocab=self.vocab,
        suffix_indicator="##",
        max_bytes_per_word=4 * MAX_CHARS_PER_WORD,
        token_out_type=out_type,
        unknown_token="[UNK]",
        no_pretokenization=True)

  @property
  def vocab_size(self) -> int:
    return len(self.vocab)

  def token_to_id(self, token: str) -> int:
    """The id of a vocab token (KeyError naming the token if absent)."""
    return self._token_to_id[token]

  # --- the graph pieces ---

  def _lower(self, text: tf.Tensor) -> tf.Tensor:
    """Python's str.lower, then NFD and deletion of category Mn."""
    if self._lower_fixes:
      def fix(t):
        for char, target in self._lower_fixes:
          t = tf.strings.regex_replace(t, _re2_char(ord(char)), target)
        return t
      # The fixes are dozens of passes, so run them only for batches that need them (rare).
      needs_fix = tf.reduce_any(
          tf.strings.regex_full_match(text, "(?s).*" + self._lower_fix_detect + ".*"))
      text = tf.cond(needs_fix, lambda: fix(text), lambda: text)
    text = tf.strings.regex_replace(text, "I", "i")  # see _untailor
    text = tf.strings.lower(text, encoding="utf-8")
    text = tf_text.normalize_utf8(text, "NFD")
    return tf.strings.regex_replace(text, self._patterns["mark"], "")

  def _clean(self, text: tf.Tensor) -> tf.Tensor:
    """Invalid bytes dropped (drop_invalid_utf8), deleted characters deleted, lower-cased
    (do_lower_case): any UTF-8 text."""
    if self.drop_invalid_utf8:
      text = tf.strings.unicode_transcode(
          text, "UTF-8", "UTF-8", errors="ignore", replace_control_characters=False)
    text = tf.strings.regex_replace(text, self._patterns["remove"], "")
    return self._lower(text) if self.do_lower_case else text

  def _clean_ascii(self, text: tf.Tensor) -> tf.Tensor:
    """_clean for ASCII text, where the Unicode passes change nothing: ASCII is valid UTF-8,
    has no combining marks, no character that NFD decomposes or that the lower-casing fixes
    touch, and lower-cases byte by byte (in every locale: the graph's "I" -> "i" is ASCII's
    own rule)."""
    text = tf.strings.regex_replace(text, self._patterns["remove"], "")
    return tf.strings.lower(text) if self.do_lower_case else text

  def _split_words(self, text: tf.Tensor) -> tf.RaggedTensor:
    p = self._patterns
    # The original splits on whitespace and spaces out CJK before lower-casing, and splits off
    # punctuation after it. Doing all the spacing after lower-casing is the same: spaces and CJK
    # ideographs are neither cased nor case-ignorable (so final sigma sees the same context),
    # NFD keeps CJK ideographs CJK, and no character lower-cases or decomposes into whitespace.
    if self.drop_invalid_utf8 or self.do_lower_case:
      # A batch of ASCII text (most English requests) skips the Unicode passes, which cost a
      # served short text more than the rest of its tokenization.
      all_ascii = tf.reduce_all(tf.strings.regex_full_match(text, "[\\x00-\\x7f]*"))
      text = tf.cond(all_ascii, lambda: self._clean_ascii(text), lambda: self._clean(text))
    else:
      text = self._clean(text)
    text = tf.strings.regex_replace(text, p["space"], " ")
    text = tf.strings.regex_replace(text, p["alone"], r" \0 ")
    return split_on_spaces(text)

  def _word_pieces(self, words: tf.RaggedTensor) -> tf.RaggedTensor:
    """Words [batch, (words)] -> ids [batch, (words), (pieces)]."""
    flat = words.flat_values
    raw = self._wordpiece.tokenize(flat)

    def limit_chars():
      # Words over the character limit become a single [UNK]: their pieces are dropped and one
      # [UNK] appended.
      too_long = tf.strings.length(flat, unit="UTF8_CHAR") > MAX_CHARS_PER_WORD
      lengths = raw.row_lengths()
      kept = tf.RaggedTensor.from_row_lengths(
          tf.boolean_mask(raw.values, tf.repeat(tf.logical_not(too_long), lengths)),
          tf.where(too_long, tf.zeros_like(lengths), lengths))
      unk_lengths = tf.cast(too_long, lengths.dtype)
      unk = tf.RaggedTensor.from_row_lengths(
          tf.fill([tf.reduce_sum(unk_lengths)], tf.constant(self.unk_id, self.out_type)),
          unk_lengths)
      return tf.concat([kept, unk], axis=1)

    # Only a word of more than MAX_CHARS_PER_WORD bytes can have too many characters, and such
    # words are rare, so the character count runs only for batches holding one.
    any_long = tf.reduce_any(tf.strings.length(flat) > MAX_CHARS_PER_WORD)
    pieces = tf.cond(any_long, limit_chars, lambda: raw)
    # Unchecked: the row splits are the words' own, which the split made valid.
    return tf.RaggedTensor.from_row_splits(pieces, words.row_splits, validate=False)

  def _wordpiece_ids(self, words: tf.RaggedTensor) -> tf.RaggedTensor:
    """Words [batch, (words)] -> ids [batch, (pieces)]."""
    pieces = self._word_pieces(words)
    return tf.RaggedTensor.from_row_splits(
        pieces.flat_values, tf.gather(pieces.values.row_splits, pieces.row_splits),
        validate=False)

  # --- public graph functions ---

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
  def split_words(self, strings: tf.Tensor) -> tf.RaggedTensor:
    """The reference BasicTokenizer's words: [batch] strings -> RaggedTensor [batch, (words)]."""
    return self._split_words(strings)

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
  def tokenize(self, strings: tf.Tensor) -> tf.RaggedTensor:
    """WordPiece ids: [batch] UTF-8 strings -> RaggedTensor [batch, (pieces)] of out_type."""
    return self._wordpiece_ids(self._split_words(strings))

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
  def tokenize_words(self, strings: tf.Tensor) -> tf.RaggedTensor:
    """WordPiece ids by word: [batch] strings -> RaggedTensor [batch, (words), (pieces)].

    Every word has at least one piece ([UNK] when nothing matches); merging the two ragged
    dimensions gives `tokenize`'s ids.
    """
    return self._word_pieces(self._split_words(strings))

  # --- Python convenience ---

  def tokenize_lines(self, lines: Sequence[str], batch_size: int = 1024,
                     num_threads: Optional[int] = None) -> List[List[int]]:
    """Tokenizes Python strings in batches; returns one list of ids per line.

    Args:
      lines: the texts.
      batch_size: lines per graph call; large batches amortise the per-call overhead.
      num_threads: batches tokenized at once (the graph releases the GIL, so threads use
        several cores); default: the number of CPUs, at most 4.

    Returns:
      ids per line, as Python ints, in the order of `lines`.
    """
    if batch_size < 1:
      raise ValueError("batch_size must be positive, got %d" % batch_size)
    if num_threads is None:
      num_threads = min(4, os.cpu_count() or 1)
    batches = [list(lines[i:i + batch_size]) for i in range(0, len(lines), batch_size)]
    if num_threads <= 1 or len(batches) <= 1:
      per_batch = map(self._tokenize_batch, batches)
      return [ids for batch in per_batch for ids in batch]
    with concurrent.futures.ThreadPoolExecutor(num_threads) as pool:
      return [ids for batch in pool.map(self._tokenize_batch, batches) for ids in batch]

  def _tokenize_batch(self, batch: List[str]) -> List[List[int]]:
    ids = self.tokenize(tf.constant(batch, dtype=tf.string))
    values = ids.values.numpy().tolist()
    splits = ids.row_splits.numpy().tolist()
    return [values[splits[i]:splits[i + 1]] for i in range(len(batch))]
