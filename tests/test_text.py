"""Tests for bert_tf/text.py: the in-graph tokenizer must give the reference FullTokenizer's ids."""

import os
import subprocess
import sys
import unicodedata

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf import text
from bert_tf import tokenization

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
REPO_ROOT = os.path.dirname(os.path.dirname(DATA))
VOCAB = os.path.join(DATA, "vocab_uncased.txt")
# Lines of the four development corpora, chosen to cover every non-ASCII, non-CJK character in
# them plus random ordinary lines (see tests/data/text_README.md).
CORPUS_LINES = os.path.join(DATA, "text_corpus_lines.txt")

LOWER = [True, False]


@pytest.fixture(scope="module", params=LOWER, ids=["uncased", "cased"])
def pair(request):
  """(in-graph tokenizer, reference tokenizer) for one do_lower_case setting."""
  return (text.InGraphTokenizer(VOCAB, do_lower_case=request.param),
          tokenization.FullTokenizer(VOCAB, do_lower_case=request.param))


def _ids(tokenizer, lines):
  return tokenizer.tokenize(tf.constant(lines, dtype=tf.string)).to_list()


def _assert_same_as_reference(pair_, lines):
  fast, reference = pair_
  got = fast.tokenize_lines(lines)
  for line, ids in zip(lines, got):
    assert ids == reference.tokenize_to_ids(line), "line %r (code points %s)" % (
        line[:80], [hex(ord(c)) for c in line[:40]])
  assert len(got) == len(lines)


# === Golden examples ===

GOLDEN_LINES = [
    "Hello, world!",
    "Héllo naïve café RÉSUMÉ Ångström",
    "一般的规则是，ACPI命名空间应该描述操作系统",
    "中文字符测试 with English and 한국어 and ひらがな カタカナ",
    "𠀀𪜀 CJK extensions 丽 and compatibility 豈",
    "don't stop-me now... (really?) [CLS] {x} <y> $5 ^_^ `code` ~a|b\\c",
    "¿Qué? ¡Sí! «quotes» “curly” ‘single’ — dash – en ‥ … ・",
    "ctrl\x00chars\x07here\x1b[0m and\u200bzero\u200dwidth\u00adsoft \ufffd replaced",
    "tabs\tand\nnewlines\rand\u00a0nbsp\u3000ideographic\u2028line\u2029para\u1680ogham",
    "ﬁne ² ß ＡＢＣ ™ ½ Ⅻ ㎏",
    "ΟΔΟΣ ΟΔΟΣ. ΣΑΣ Σ İstanbul ǅemal",
    "Ⰿ ꟀꟐ 𐕰𐕱 \u1fef\u1fefa",  # lower-casing new in Unicode 14; U+1FEF decomposes to "`"
    "e\u0301 a\u0308\u0304 \u0345 combining-only: \u0301\u0302",
    "☃ ☃☃ 😀 xyzzyqqq unaffable",
    "",
    "   ",
    "\x00\u200b",
    "a" * 200,
    "a" * 201,
    "b" * 199 + "\u0301\u0301",  # 201 characters, 199 after accent stripping
    "É" * 200 + " " + "É" * 201,
    "é" * 150 + " ok",  # over 200 bytes but 150 characters
    "x" * 250 + " then normal words " + "y" * 300,
    "[UNK] [SEP] [MASK] ##ing ## #",
]


def test_golden_ids():
  tokenizer = text.InGraphTokenizer(VOCAB, do_lower_case=True)
  assert tokenizer.tokenize_lines(["Hello, world!", "Héllo naïve café 中文", ""]) == [
      [7592, 1010, 2088, 999], [7592, 15743, 7668, 1746, 1861], []]
  cased = text.InGraphTokenizer(VOCAB, do_lower_case=False)
  # The uncased vocab has no "Hello": cased tokenization of capitals gives [UNK].
  assert cased.tokenize_lines(["Hello, world!"]) == [[100, 1010, 2088, 999]]


def test_golden_lines_match_reference(pair):
  _assert_same_as_reference(pair, GOLDEN_LINES)


def test_word_length_limit_is_200_characters(pair):
  fast, _ = pair
  unk = fast.unk_id
  ids = fast.tokenize_lines(["a" * 200, "a" * 201, "é" * 201, "ok " + "a" * 201 + " ok"])
  assert ids[0] != [unk] and len(ids[0]) > 1
  assert ids[1] == [unk]
  assert ids[2] == [unk]
  ok = fast.token_to_id("ok")
  assert ids[3] == [ok, unk, ok]


def test_special_token_ids():
  tokenizer = text.InGraphTokenizer(VOCAB)
  assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id,
          tokenizer.mask_id) == (0, 100, 101, 102, 103)
  assert tokenizer.vocab_size == 30522
  assert tokenizer.token_to_id("hello") == 7592


def test_batch_of_mixed_lengths(pair):
  fast, reference = pair
  lines = ["", "a", "Hello, world!", "中文" * 30, "x" * 300, "   ", "naïve " * 40]
  ragged = fast.tokenize(tf.constant(lines))
  assert isinstance(ragged, tf.RaggedTensor)
  assert ragged.dtype == tf.int32
  assert ragged.shape.rank == 2 and ragged.shape[0] == len(lines)
  assert ragged.to_list() == [reference.tokenize_to_ids(l) for l in lines]
  # Batching does not change results: each line alone gives the same ids.
  assert [_ids(fast, [l])[0] for l in lines] == ragged.to_list()


def test_tokenize_lines_batches(pair):
  fast, reference = pair
  lines = ["line %d, é %s" % (i, "中" * (i % 3)) for i in range(11)]
  assert fast.tokenize_lines(lines, batch_size=3) == [reference.tokenize_to_ids(l) for l in lines]
  assert fast.tokenize_lines([]) == []


def test_int64_output():
  tokenizer = text.InGraphTokenizer(VOCAB, out_type=tf.int64)
  ragged = tokenizer.tokenize(tf.constant(["Hello " + "a" * 201]))
  assert ragged.dtype == tf.int64
  assert ragged.to_list() == [[7592, 100]]
  with pytest.raises(ValueError, match="out_type"):
    text.InGraphTokenizer(VOCAB, out_type=tf.float32)


# === Real corpus lines ===


def _corpus_lines():
  with open(CORPUS_LINES, "rb") as f:
    lines = f.read().decode("utf-8").split("\n")
  return lines


def test_corpus_fixture_is_real_and_varied():
  lines = _corpus_lines()
  assert len(lines) > 600
  assert sum(any(tokenization.is_cjk_codepoint(ord(c)) for c in l) for l in lines) > 200
  assert sum(l.isascii() and l != "" for l in lines) > 100
  assert len({c for l in lines for c in l if ord(c) > 127}) > 1000


def test_corpus_lines_match_reference(pair):
  _assert_same_as_reference(pair, _corpus_lines())


# === Random Unicode ===

FINAL_SIGMA_CHARS = frozenset(
    chr(cp) for lo, hi in text.FINAL_SIGMA_KNOWN_DIFFERENCES for cp in range(lo, hi + 1))

# Characters that exercise the interesting paths more often than uniform code points would.
_INTERESTING = (
    list(" \t\n\r\x00\x07\u00a0\u2028\u3000\u200b\u00ad\ufffd.,!?'`^$#-[]") +
    list("aAeEzZ0é\u0301\u0308ΣσςΑΟİıßﬁ²中文丽𠀀한ひ\u1fef\u0345ǅ"))


@st.composite
def _unicode_lines(draw):
  alphabet = st.one_of(
      st.characters(exclude_categories=("Cs",), exclude_characters=FINAL_SIGMA_CHARS),
      st.sampled_from(_INTERESTING))
  return draw(st.lists(st.text(alphabet, max_size=30), min_size=1, max_size=6))


@hypothesis.settings(max_examples=150, deadline=None,
                     suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])
@hypothesis.given(lines=_unicode_lines())
def test_random_unicode_matches_reference(pair, lines):
  _assert_same_as_reference(pair, lines)


NFD_CHARS = frozenset(chr(cp) for cp in text.NFD_KNOWN_DIFFERENCES)


@hypothesis.settings(max_examples=100, deadline=None,
                     suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])
@hypothesis.given(lines=_unicode_lines())
def test_random_unicode_words_match_reference(pair, lines):
  # The words themselves, before WordPiece, agree too (except for the NFD differences, which
  # change the words but never the ids).
  fast, reference = pair
  hypothesis.assume(not any(c in NFD_CHARS for line in lines for c in line))
  words = fast.split_words(tf.constant(lines)).to_list()
  expected = [[w.encode("utf-8") for w in reference.basic_tokenizer.tokenize(l)] for l in lines]
  assert words == expected


@pytest.fixture(scope="module")
def fixup_pair(tmp_path_factory):
  """Tokenizers over a vocab holding the lower case of every capital tf.strings.lower misses."""
  targets = sorted({target for _, target in text.lowercase_mismatches()})
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "x", ".", "e"] + targets
  tokens += ["##" + t for t in targets]
  path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
  path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
  return (text.InGraphTokenizer(str(path), do_lower_case=True),
          tokenization.FullTokenizer(str(path), do_lower_case=True))


@hypothesis.settings(max_examples=60, deadline=None,
                     suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])
@hypothesis.given(lines=st.lists(st.text(
    st.sampled_from([c for c, _ in text.lowercase_mismatches()] + ["x", "É", " ", "."]),
    max_size=30), min_size=1, max_size=6))
def test_lowercase_fixups_match_reference(fixup_pair, lines):
  # Capitals that tf.strings.lower does not know (no capital sigma beside them) lower-case to
  # vocab tokens here, so a missing fix-up would change the ids.
  _assert_same_as_reference(fixup_pair, lines)


# === Pinned Unicode-version differences ===


def _all_chars():
  return [chr(cp) for cp in range(sys.maxunicode + 1) if not 0xD800 <= cp <= 0xDFFF]


def test_lowercase_mismatches_are_exactly_the_unicode14_capitals():
  expected = {0x2C2F, 0xA7C0, 0xA7D0, 0xA7D6, 0xA7D8}
  expected |= set(range(0x10570, 0x10596)) - {0x1057B, 0x1058B, 0x10593}
  mismatches = text.lowercase_mismatches()
  assert {ord(c) for c, _ in mismatches} == expected
  assert all(target == c.lower() for c, target in mismatches)


def test_nfd_known_differences_are_exact_and_harmless():
  chars = _all_chars()
  ours = tf_text.normalize_utf8(tf.constant(chars), "NFD").numpy()
  differ = [c for c, o in zip(chars, ours) if o.decode("utf-8") != unicodedata.normalize("NFD", c)]
  assert tuple(ord(c) for c in differ) == text.NFD_KNOWN_DIFFERENCES
  # Harmless for ids: Python does not know these characters, nor what they decompose into
  # (marks aside, which are deleted), so the word holding them is [UNK] on both paths.
  for c, o in zip(chars, ours):
    if c in differ:
      assert unicodedata.category(c) == "Cn"
      assert all(unicodedata.category(d) in ("Cn", "Mn") for d in o.decode("utf-8"))


@pytest.mark.slow
def test_final_sigma_known_differences_are_exact():
  chars = [c for c in _all_chars() if not tokenization.is_removed_when_cleaning(c)]
  differ = set()
  for template in ("ΑΣ%s", "%sΣ", "Α%sΣ"):
    probes = [template % c for c in chars]
    lowered = tf.strings.lower(tf.constant(probes), encoding="utf-8").numpy()
    for c, probe, low in zip(chars, probes, lowered):
      if ("ς" in probe.lower()) != ("ς" in low.decode("utf-8")):
        differ.add(c)
  assert differ == FINAL_SIGMA_CHARS
  assert len(differ) == 301


def test_final_sigma_known_difference_in_ids():
  # "\U00010570" is a Unicode 14 capital: Python treats it as cased, so the sigma after it (past
  # the case-ignorable ".") is word-final; TensorFlow's ICU does not know the letter.
  line = "\U00010570.Σ"
  fast = text.InGraphTokenizer(VOCAB, do_lower_case=True)
  reference = tokenization.FullTokenizer(VOCAB, do_lower_case=True)
  final_sigma, sigma = reference.convert_tokens_to_ids(["ς", "σ"])
  assert reference.tokenize_to_ids(line) == [100, 1012, final_sigma]
  assert fast.tokenize_lines([line]) == [[100, 1012, sigma]]
  # Without that neighbour both agree.
  assert fast.tokenize_lines(["x.Σ"]) == [reference.tokenize_to_ids("x.Σ")]


# === Graph use ===


def test_inside_tf_function_and_dataset():
  tokenizer = text.InGraphTokenizer(VOCAB)
  lines = ["Hello, world!", "naïve 中文", ""]

  @tf.function
  def padded(strings):
    return tokenizer.tokenize(strings).to_tensor(default_value=tokenizer.pad_id)

  np.testing.assert_array_equal(
      padded(tf.constant(lines)).numpy(),
      [[7592, 1010, 2088, 999], [15743, 1746, 1861, 0], [0, 0, 0, 0]])
  dataset = tf.data.Dataset.from_tensor_slices(lines).batch(2).map(tokenizer.tokenize)
  got = [row for batch in dataset for row in batch.to_list()]
  assert got == tokenizer.tokenize_lines(lines)


@pytest.mark.slow
def test_saved_model_round_trip(tmp_path):
  tokenizer = text.InGraphTokenizer(VOCAB, do_lower_case=True)
  lines = ["Hello, World!", "ΟΔΟΣ İstanbul ﬁne", "\U00010570 abc", "a" * 201 + " 中文", ""]
  expected = tokenizer.tokenize_lines(lines)
  path = str(tmp_path / "tokenizer")
  tf.saved_model.save(tokenizer, path)
  loaded = tf.saved_model.load(path)
  assert loaded.tokenize(tf.constant(lines)).to_list() == expected
  words = loaded.split_words(tf.constant(["Héllo, world"])).to_list()
  assert words == [[b"hello", b",", b"world"]]


def test_the_vocabulary_is_plain_data_that_saving_does_not_walk():
  """The tokens and their ids stay Python data: not wrapped or tracked by TensorFlow (so
  tf.saved_model.save does not visit every entry), and not walked by tf.Module's properties."""
  tokenizer = text.InGraphTokenizer(VOCAB, do_lower_case=True)
  children = tf.train.TrackableView(tokenizer).children(tokenizer)
  assert not {"vocab", "_token_to_id"} & set(children), sorted(children)
  assert type(tokenizer.vocab) is list and len(tokenizer.vocab) == tokenizer.vocab_size
  assert tokenizer.token_to_id(tokenizer.vocab[7]) == 7
  assert all(isinstance(module, tf.Module) for module in tokenizer.submodules)


# === Vocab handling and errors ===


def test_vocab_list_matches_vocab_file():
  with open(VOCAB, encoding="utf-8") as f:
    tokens = [line.strip() for line in f]
  from_list = text.InGraphTokenizer(tokens)
  from_file = text.InGraphTokenizer(VOCAB)
  lines = _corpus_lines()[:50]
  assert from_list.tokenize_lines(lines) == from_file.tokenize_lines(lines)


def test_vocab_list_duplicates_and_empty_tokens():
  # As in a dict built line by line, a repeated token keeps its later id; "" matches nothing.
  tokenizer = text.InGraphTokenizer(["[UNK]", "ab", "", "##c", "ab", "x"], do_lower_case=False)
  assert tokenizer.tokenize_lines(["ab abc x y", "abd"]) == [[4, 4, 3, 5, 0], [0]]


def test_vocab_without_unk_is_an_error():
  with pytest.raises(ValueError, match=r"\[UNK\]"):
    text.InGraphTokenizer(["[PAD]", "a"])


def test_drop_invalid_utf8_matches_decode_ignore():
  tokenizer = text.InGraphTokenizer(VOCAB, drop_invalid_utf8=True)
  reference = tokenization.FullTokenizer(VOCAB)
  raw = [b"ab\xffcd", b"\xe4\xb8", b"x\xe4\xb8y \xc3\xa9", b"\xf0\x9f\x98 z", b"\xed\xa0\x80q"]
  got = tokenizer.tokenize(tf.constant(raw)).to_list()
  assert got == [reference.tokenize_to_ids(r.decode("utf-8", "ignore")) for r in raw]


@pytest.mark.slow
def test_ids_do_not_depend_on_the_locale(tmp_path):
  # ICU lower-cases "I" to dotless "ı" under a Turkish default locale; the graph must not.
  script = tmp_path / "turkish.py"
  script.write_text(
      "import sys\n"
      "sys.path.insert(0, %r)\n"
      "from bert_tf import text\n"
      "tokenizer = text.InGraphTokenizer(%r)\n"
      "print(tokenizer.tokenize_lines(['IBM IS Istanbul İzmir']))\n" % (
          REPO_ROOT, VOCAB),
      encoding="utf-8")
  env = dict(os.environ, LANG="tr_TR.UTF-8", LC_ALL="tr_TR.UTF-8", TF_CPP_MIN_LOG_LEVEL="3")
  result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, check=True)
  expected = text.InGraphTokenizer(VOCAB).tokenize_lines(["IBM IS Istanbul İzmir"])
  assert expected == [tokenization.FullTokenizer(VOCAB).tokenize_to_ids("IBM IS Istanbul İzmir")]
  assert result.stdout.strip().splitlines()[-1] == str(expected)
