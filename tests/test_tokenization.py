"""Tests for bert_tf/tokenization.py.

The oracle below is a deliberately naive, character-by-character transcription of the tokenization
rules of the original tokenization.py, written independently of the module (it uses its own
character tests). The fast tokenizer must agree with it on golden examples, random Unicode text
and real corpus lines.
"""

import os
import re
import subprocess
import sys
import unicodedata

import hypothesis
from hypothesis import strategies as st
import pytest

from bert_tf import tokenization

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
VOCAB_UNCASED = os.path.join(DATA, "vocab_uncased.txt")
# 800 real lines, 200 from each of the development corpora (Jane Austen + Moby Dick, World English
# Bible, Linux kernel Documentation prose, Chinese kernel docs + Tang/Song poems; see the data
# README), picked so the non-ASCII lines cover as many distinct characters as possible.
CORPUS_SAMPLE = os.path.join(DATA, "corpus_sample_lines.txt")

# === The naive oracle (spec in code) ===

_ORACLE_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def oracle_is_space(ch):
  return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def oracle_is_dropped(ch):
  if ch in "\t\n\r":
    return False
  return ord(ch) in (0, 0xFFFD) or unicodedata.category(ch) in ("Cc", "Cf")


def oracle_is_punct(ch):
  cp = ord(ch)
  ascii_symbol = 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126
  return ascii_symbol or unicodedata.category(ch)[0] == "P"


def oracle_is_cjk(ch):
  for lo, hi in _ORACLE_CJK:
    if lo <= ord(ch) <= hi:
      return True
  return False


def oracle_basic(text, lower):
  """Words and punctuation of `text`, one step at a time, one character at a time."""
  cleaned = ""
  for ch in text:
    if oracle_is_dropped(ch):
      continue
    cleaned += " " if oracle_is_space(ch) else ch
  spaced = ""
  for ch in cleaned:
    spaced += " " + ch + " " if oracle_is_cjk(ch) else ch
  pieces = []
  for word in spaced.split():
    if lower:
      decomposed = unicodedata.normalize("NFD", word.lower())
      word = "".join(c for c in decomposed if unicodedata.category(c) != "Mn")
    current = None
    for ch in word:
      if oracle_is_punct(ch):
        pieces.append(ch)
        current = None
      elif current is None:
        pieces.append(ch)
        current = len(pieces) - 1
      else:
        pieces[current] += ch
  # The original joins with spaces and splits once more; kept so the oracle mirrors it exactly.
  return " ".join(pieces).split()


def oracle_wordpiece(word, vocab, max_chars=200):
  if len(word) > max_chars:
    return ["[UNK]"]
  out = []
  start = 0
  while start < len(word):
    end = len(word)
    found = None
    while end > start:
      candidate = word[start:end] if start == 0 else "##" + word[start:end]
      if candidate in vocab:
        found = candidate
        break
      end -= 1
    if found is None:
      return ["[UNK]"]
    out.append(found)
    start = end
  return out


def oracle_full(text, vocab, lower):
  return [p for w in oracle_basic(text, lower) for p in oracle_wordpiece(w, vocab)]


# === Fixtures ===


@pytest.fixture(scope="module")
def uncased():
  return tokenization.FullTokenizer(VOCAB_UNCASED, do_lower_case=True)


@pytest.fixture(scope="module")
def cased():
  # The uncased vocab has no capitals, so cased words mostly become [UNK]; that still exercises
  # the cased basic tokenizer and the wordpiece search.
  return tokenization.FullTokenizer(VOCAB_UNCASED, do_lower_case=False)


SMALL_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "want", "##want", "##ed", "wa", "un",
               "runn", "##ing", ",", "a", "##a", "Héllo", "hello", "##llo", "he", "##s"]


@pytest.fixture()
def small(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(SMALL_VOCAB) + "\n", encoding="utf-8")
  return tokenization.FullTokenizer(str(path), do_lower_case=True)


def write_vocab(tmp_path, data: bytes):
  path = tmp_path / "vocab.txt"
  path.write_bytes(data)
  return str(path)


# === Golden examples ===

GOLDEN_BASIC = [
    # (text, uncased words, cased words)
    ("Héllo, World!", ["hello", ",", "world", "!"], ["Héllo", ",", "World", "!"]),
    ("ÀÉÎÕÜ ñ", ["aeiou", "n"], ["ÀÉÎÕÜ", "ñ"]),
    ("中文abc字", ["中", "文", "abc", "字"], ["中", "文", "abc", "字"]),
    # Hangul is not split; lower-casing decomposes it into conjoining jamo (NFD).
    ("한국어", [unicodedata.normalize("NFD", "한국어")], ["한국어"]),
    ("a^b$c`d~e", ["a", "^", "b", "$", "c", "`", "d", "~", "e"],
     ["a", "^", "b", "$", "c", "`", "d", "~", "e"]),
    ("«hi»—ok…¿", ["«", "hi", "»", "—", "ok", "…", "¿"], ["«", "hi", "»", "—", "ok", "…", "¿"]),
    ("don't", ["don", "'", "t"], ["don", "'", "t"]),
    ("a\x00b", ["ab"], ["ab"]),
    ("a\u200bb", ["ab"], ["ab"]),
    ("\x07", [], []),
    ("a\ufffdb", ["ab"], ["ab"]),
    ("a\tb\nc\rd", ["a", "b", "c", "d"], ["a", "b", "c", "d"]),
    ("a\u00a0b\u3000c\u2028d\u2029e", ["a", "b", "c", "d", "e"], ["a", "b", "c", "d", "e"]),
    ("", [], []),
    ("  \t\n \u3000 ", [], []),
    ("[CLS] x", ["[", "cls", "]", "x"], ["[", "CLS", "]", "x"]),
    # Final sigma: lower() looks across case-ignorable "." but not across whitespace.
    ("ΑΣ ΑΣ", ["ας", "ας"], ["ΑΣ", "ΑΣ"]),
    ("ΑΣ.Α", ["ασ", ".", "α"], ["ΑΣ", ".", "Α"]),
    ("İstanbul", ["istanbul"], ["İstanbul"]),
    # U+1FEF GREEK VARIA is a symbol (Sk) whose NFD is "`": punctuation only after lower-casing.
    ("a\u1fefb", ["a", "`", "b"], ["a\u1fefb"]),
    # A lone combining accent disappears when lower-casing, stays a word otherwise.
    ("x \u0301 y", ["x", "y"], ["x", "\u0301", "y"]),
    # Above U+FFFF: CJK extension B, Brahmi danda (Po), a combining mark (Mn), a tag (Cf).
    ("a\U00020000b\U00011047c\U0001d167d\U000e0001e", ["a", "\U00020000", "b", "\U00011047", "cde"],
     ["a", "\U00020000", "b", "\U00011047", "c\U0001d167de"]),
    # A CJK compatibility ideograph whose NFD lies above U+FFFF.
    ("a\ufa6cb", ["a", "\U000242ee", "b"], ["a", "\ufa6c", "b"]),
]


@pytest.mark.parametrize("text,want_uncased,want_cased", GOLDEN_BASIC)
def test_basic_tokenizer_golden(text, want_uncased, want_cased):
  assert tokenization.BasicTokenizer(do_lower_case=True).tokenize(text) == want_uncased
  assert tokenization.BasicTokenizer(do_lower_case=False).tokenize(text) == want_cased
  assert oracle_basic(text, True) == want_uncased
  assert oracle_basic(text, False) == want_cased


def test_full_tokenizer_golden_uncased(uncased):
  assert uncased.tokenize("Hello, WORLD! Héllo") == ["hello", ",", "world", "!", "hello"]
  assert uncased.tokenize("中文 😀 snowman ☃") == ["中", "文", "[UNK]", "snow", "##man", "[UNK]"]
  # "☃" is a symbol (So), not punctuation, so it stays in the word, which then matches nothing.
  assert uncased.tokenize("snowman☃") == ["[UNK]"]
  assert uncased.tokenize("unaffable") == ["una", "##ffa", "##ble"]  # Greedy, not best.
  assert uncased.tokenize(b"caf\xc3\xa9") == ["cafe"]
  ids = uncased.tokenize_to_ids("Hello, WORLD!")
  assert ids == [7592, 1010, 2088, 999]
  assert uncased.convert_ids_to_tokens(ids) == ["hello", ",", "world", "!"]
  assert uncased.convert_tokens_to_ids(["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]"]) == [
      101, 102, 103, 0, 100]


def test_wordpiece_greedy_longest_match(small):
  assert small.tokenize("unwanted running") == ["un", "##want", "##ed", "runn", "##ing"]
  assert small.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]
  assert small.tokenize("hellos, wa") == ["hello", "##s", ",", "wa"]
  assert small.tokenize("") == []
  assert small.tokenize_to_ids("unwanted,") == [9, 6, 7, 12]
  # Standalone WordpieceTokenizer splits its input on whitespace first.
  wp = tokenization.WordpieceTokenizer(vocab=small.vocab)
  assert wp.tokenize(" unwanted  wa ") == ["un", "##want", "##ed", "wa"]


def test_word_length_limit_is_200_characters(small):
  assert small.tokenize("a" * 200) == ["a"] + ["##a"] * 199
  assert small.tokenize("a" * 201) == ["[UNK]"]
  # The limit counts characters after lower-casing and accent stripping.
  assert small.tokenize("á" * 200) == ["a"] + ["##a"] * 199
  assert tokenization.WordpieceTokenizer(small.vocab, max_input_chars_per_word=3).tokenize(
      "aaa aaaa") == ["a", "##a", "##a", "[UNK]"]


def test_cased_keeps_case_and_accents(tmp_path):
  path = write_vocab(tmp_path, "\n".join(SMALL_VOCAB).encode("utf-8"))
  cased = tokenization.FullTokenizer(path, do_lower_case=False)
  assert cased.tokenize("Héllo hello HELLO") == ["Héllo", "hello", "[UNK]"]
  uncased = tokenization.FullTokenizer(path, do_lower_case=True)
  assert uncased.tokenize("Héllo hello HELLO") == ["hello", "hello", "hello"]


def test_small_cache_gives_same_results(uncased):
  text = open(CORPUS_SAMPLE, encoding="utf-8").read()[:20000]
  tiny = tokenization.WordpieceTokenizer(uncased.vocab, cache_size=3)
  words = uncased.basic_tokenizer.tokenize(text)
  assert tiny.tokenize_words(words) == uncased.tokenize(text)
  assert tiny.tokenize_words_to_ids(words) == uncased.tokenize_to_ids(text)


# === Conversions and errors ===


def test_convert_to_unicode():
  assert tokenization.convert_to_unicode("héllo") == "héllo"
  assert tokenization.convert_to_unicode("héllo".encode("utf-8")) == "héllo"
  with pytest.raises(ValueError, match="byte offset 3"):
    tokenization.convert_to_unicode(b"abc\xff")
  with pytest.raises(ValueError, match="Unsupported string type int"):
    tokenization.convert_to_unicode(3)


def test_unknown_tokens_and_ids_are_named(uncased):
  with pytest.raises(KeyError, match="notaword"):
    uncased.convert_tokens_to_ids(["hello", "notaword"])
  with pytest.raises(KeyError, match="30522"):
    uncased.convert_ids_to_tokens([1, 30522])
  with pytest.raises(KeyError, match="-1"):
    uncased.convert_ids_to_tokens([-1])
  assert tokenization.convert_by_vocab({"a": 1, "b": 2}, ["b", "a"]) == [2, 1]
  assert tokenization.whitespace_tokenize(" a\u2028b\tc  ") == ["a", "b", "c"]


def test_load_vocab_ids_are_line_numbers(tmp_path):
  path = write_vocab(tmp_path, b"[PAD]\n  [UNK] \r\n[CLS]\n\n[SEP]\n[MASK]\nx\ry\n")
  vocab = tokenization.load_vocab(path)
  # As in the original: stripped tokens, an empty line is the token "", and only "\n" ends a line.
  assert list(vocab.items()) == [("[PAD]", 0), ("[UNK]", 1), ("[CLS]", 2), ("", 3), ("[SEP]", 4),
                                 ("[MASK]", 5), ("x\ry", 6)]
  full = tokenization.load_vocab(VOCAB_UNCASED)
  assert len(full) == 30522
  assert (full["[PAD]"], full["[UNK]"], full["[CLS]"], full["[SEP]"], full["[MASK]"]) == (
      0, 100, 101, 102, 103)
  assert full["##s"] == 2015
  # The ids a tokenizer can produce: a blank last line (the token "") is not one of them.
  assert tokenization.id_count(vocab) == 7 and tokenization.id_count(full) == 30522
  assert tokenization.id_count(tokenization.load_vocab(
      write_vocab(tmp_path, b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n\n"))) == 5


def test_load_vocab_errors(tmp_path):
  with pytest.raises(ValueError, match=r"vocab\.txt.*\[CLS\], \[MASK\]"):
    tokenization.load_vocab(write_vocab(tmp_path, b"[PAD]\n[UNK]\n[SEP]\nhello\n"))
  with pytest.raises(ValueError, match=r"vocab\.txt: duplicate token 'hello' on lines 2 and 4"):
    tokenization.load_vocab(write_vocab(tmp_path, b"[PAD]\nhello\n[UNK]\nhello\n"))
  # Two blank lines: the message says how to keep the later ids (not "duplicate token ''").
  with pytest.raises(ValueError, match=r"vocab\.txt: lines 3 and 5 are both blank; .*such as "
                     r"\[blank5\], rather than deleting it"):
    tokenization.load_vocab(write_vocab(tmp_path, b"[PAD]\n[UNK]\n\n[CLS]\n\n[SEP]\n[MASK]\n"))
  with pytest.raises(ValueError, match=r"vocab\.txt:3: invalid UTF-8"):
    tokenization.load_vocab(write_vocab(tmp_path, b"[PAD]\n[UNK]\nbad\xe9\n[CLS]\n"))
  with pytest.raises(ValueError, match=r"lacks the special token\(s\) \[PAD\] .*byte-order mark"):
    tokenization.load_vocab(write_vocab(tmp_path, b"\xef\xbb\xbf[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n"))
  missing = str(tmp_path / "nope" / "vocab.txt")
  with pytest.raises(FileNotFoundError, match="nope"):
    tokenization.load_vocab(missing)
  with pytest.raises(FileNotFoundError, match="nope"):
    tokenization.FullTokenizer(missing)


# === Character classes: the compiled patterns against the oracle, over all of Unicode ===


@pytest.mark.slow
def test_compiled_character_classes_match_oracle():
  patterns = tokenization._patterns()  # pylint: disable=protected-access
  everything = "".join(chr(cp) for cp in range(sys.maxunicode + 1) if not 0xD800 <= cp <= 0xDFFF)
  expected = {
      "punctuation": "".join(filter(oracle_is_punct, everything)),
      "removed": "".join(filter(oracle_is_dropped, everything)),
      "nonspacing_marks": "".join(c for c in everything if unicodedata.category(c) == "Mn"),
      "cjk": "".join(filter(oracle_is_cjk, everything)),
  }
  # Each variant must be exact for the characters it is used on.
  for line, limit in ((patterns.full, sys.maxunicode), (patterns.bmp, 0xFFFF),
                      (patterns.ascii, 0x7F)):
    chars = "".join(c for c in everything if ord(c) <= limit)
    for name, want in expected.items():
      got = "".join(getattr(line, name).findall(chars))
      assert got == "".join(c for c in want if ord(c) <= limit), (name, limit)
  # Python's \s (what the word pattern excludes) must be exactly what str.split() splits on.
  assert re.findall(r"\s", everything) == list(filter(str.isspace, everything))


def test_cjk_characters_survive_lower_casing_and_nfd():
  # The fast path matches CJK characters singly after lower-casing and NFD, instead of spacing
  # them out before as the original does; that is exact only if these transforms map CJK to one
  # CJK character, create none from other characters, and CJK never affects final-sigma context.
  for cp in range(sys.maxunicode + 1):
    if 0xD800 <= cp <= 0xDFFF:
      continue
    ch = chr(cp)
    image = unicodedata.normalize("NFD", ch.lower())
    if oracle_is_cjk(ch):
      assert len(image) == 1 and oracle_is_cjk(image), hex(cp)
      assert unicodedata.category(ch) in ("Lo", "Cn"), hex(cp)
    else:
      assert not any(map(oracle_is_cjk, image)), hex(cp)


# === Property tests: fast tokenizer == oracle on random text ===

# Characters where a whole-line shortcut could differ from per-word processing.
_TRICKY = ("Σ", "σ", "ς", "Α", "İ", "I", "ı", "\u0307", "\u0301", "\u0345", "\u1fef", "\u037e",
           "\u2028", "\u2029", "\u00a0", "\u3000", "\u200b", "\u200d", "\ufeff", "\x00", "\x1c",
           "\x85", "\ufffd", "\t", "\n", " ", ".", "'", "!", "^", "中", "\uf900", "\U0002f800",
           "한", "ア", "ǅ", "ß", "ﬁ", "Å", "Ω", "a", "A", "é", "\u0300\u0316", "\U0001d400",
           "\ufa6c", "\U0001f600", "\U000e0001", "\U0001d167", "\U00011047", "\U00020000")

_any_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
_tricky_text = st.lists(st.sampled_from(_TRICKY), max_size=30).map("".join)
_mixed_text = st.lists(st.one_of(_any_text, _tricky_text), max_size=4).map(" ".join)


@hypothesis.settings(max_examples=400, deadline=None)
@hypothesis.given(text=st.one_of(_any_text, _tricky_text, _mixed_text))
def test_basic_tokenizer_matches_oracle(text):
  assert tokenization.BasicTokenizer(do_lower_case=True).tokenize(text) == oracle_basic(text, True)
  assert tokenization.BasicTokenizer(do_lower_case=False).tokenize(text) == oracle_basic(
      text, False)


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(text=st.one_of(_any_text, _tricky_text, _mixed_text))
def test_full_tokenizer_matches_oracle(uncased, cased, text):
  assert uncased.tokenize(text) == oracle_full(text, uncased.vocab, True)
  assert cased.tokenize(text) == oracle_full(text, cased.vocab, False)
  assert uncased.tokenize_to_ids(text) == uncased.convert_tokens_to_ids(uncased.tokenize(text))
  assert uncased.tokenize(text.encode("utf-8")) == uncased.tokenize(text)


_ascii_text = st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=40)


def joined_by_hand(tokenizer, texts):
  """tokenize() of each text, TEXT_BREAK between consecutive texts' words."""
  words = []
  for i, text in enumerate(texts):
    if i:
      words.append(tokenization.TEXT_BREAK)
    words += tokenizer.tokenize(text)
  return words


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(texts=st.lists(st.one_of(_ascii_text, _ascii_text, _tricky_text, _mixed_text),
                                 max_size=6),
                  as_bytes=st.booleans())
def test_tokenize_joined_is_tokenize_per_text(texts, as_bytes):
  # All-ASCII lists (one regex pass for all, with control characters, tabs and newlines inside
  # texts) and mixed ones (text by text) give every text's words, with a break between texts.
  given = [t.encode("utf-8") for t in texts] if as_bytes else texts
  for lower in (True, False):
    tokenizer = tokenization.BasicTokenizer(do_lower_case=lower)
    assert tokenizer.tokenize_joined(given) == joined_by_hand(tokenizer, texts)


def test_tokenize_joined_golden():
  tokenizer = tokenization.BasicTokenizer(do_lower_case=True)
  assert tokenizer.tokenize_joined(["Hello, World!", "", "a\nb\x00c\tD", "Ça va?"]) == [
      "hello", ",", "world", "!", "\n", "\n", "a", "bc", "d", "\n", "ca", "va", "?"]
  assert tokenizer.tokenize_joined([]) == []
  assert tokenizer.tokenize_joined(["", ""]) == ["\n"]


def test_word_ids_equal_the_pieces(uncased):
  wordpiece = uncased.wordpiece_tokenizer
  for word in ("the", "unaffable", "##ing", "x" * 201, "", "[UNK]", "héllo"):
    assert wordpiece.word_ids(word) == tuple(
        uncased.convert_tokens_to_ids(wordpiece.tokenize_words([word]))), word


# === Real corpus lines ===


def test_corpus_sample_matches_oracle(uncased, cased):
  with open(CORPUS_SAMPLE, encoding="utf-8") as f:
    lines = f.read().split("\n")
  assert len(lines) > 300
  assert sum(not line.isascii() for line in lines) > 100
  for line in lines:
    assert uncased.tokenize(line) == oracle_full(line, uncased.vocab, True), line
    assert cased.tokenize(line) == oracle_full(line, cased.vocab, False), line


# === Module hygiene ===


@pytest.mark.slow
def test_tokenizing_does_not_import_tensorflow():
  # Data-preparation workers rely on this: TensorFlow costs ~0.7 GB per process.
  code = ("import sys; from bert_tf import tokenization as t; "
          f"tok = t.FullTokenizer({VOCAB_UNCASED!r}); assert tok.tokenize('Héllo 中') == "
          "['hello', '中'], tok.tokenize('Héllo 中'); "
          "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'")
  result = subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(os.path.dirname(DATA)),
                          capture_output=True, text=True, check=False)
  assert result.returncode == 0, result.stderr


def test_load_vocab_through_gfile():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top  (slow: only this test needs it)
  path = "ram://tokenization_test/vocab.txt"
  with tf.io.gfile.GFile(path, "w") as f:
    f.write("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n")
  assert tokenization.load_vocab(path)["hello"] == 5
  with pytest.raises(FileNotFoundError, match="ram://tokenization_test/missing.txt"):
    tokenization.load_vocab("ram://tokenization_test/missing.txt")
