"""build_vocab: the original vocab layout, determinism, coverage of the sample, CLI errors."""

import collections
import os
import subprocess
import sys

import pytest

from bert_tf import tokenization
from bert_tf.data import vocab as build_vocab
from bert_tf.data import corpus
from tests import helpers

REPO_ROOT = helpers.REPO_ROOT
SAMPLE = os.path.join(REPO_ROOT, "data_prep", "sample", "sample_text.txt")


@pytest.fixture(scope="module")
def sample_counts():
  return build_vocab.count_words([SAMPLE], do_lower_case=True)


@pytest.fixture(scope="module")
def sample_vocab(sample_counts, tmp_path_factory):
  vocab = build_vocab.build_vocab(sample_counts, vocab_size=6000, num_unused=994)
  path = str(tmp_path_factory.mktemp("vocab") / "vocab.txt")
  build_vocab.write_vocab(vocab, path)
  return vocab, path


def test_reserved_layout_matches_the_released_vocab():
  released = [line.rstrip("\n") for line in open(
      os.path.join(REPO_ROOT, "tests", "data", "vocab_uncased.txt"), encoding="utf-8")]
  reserved = build_vocab.reserved_tokens(994)
  assert len(reserved) == 999
  assert released[:999] == reserved
  assert build_vocab.reserved_tokens(3) == [
      "[PAD]", "[unused0]", "[unused1]", "[unused2]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.mark.slow
def test_sample_vocab_layout_and_size(sample_vocab):
  vocab, path = sample_vocab
  assert len(vocab) == 6000 and len(set(vocab)) == 6000
  ids = tokenization.load_vocab(path)
  assert [ids[t] for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [0, 100, 101, 102, 103]
  assert ids["[unused99]"] == 104 and ids["[unused993]"] == 998
  # The learner filled the vocab to within its 5% slack: few top-up slots beyond the 994.
  assert 994 <= sum(t.startswith("[unused") for t in vocab) <= 994 + 0.05 * (6000 - 999)
  learned = vocab[999:]
  # Every character of the frequent words is a piece and a continuation piece.
  for ch in "etaoinshrdlu,.;":
    assert ch in ids and "##" + ch in ids
  assert "the" in ids and "elizabeth" in ids
  assert sum(t.startswith("##") for t in learned) > 500


@pytest.mark.slow
def test_sample_tokenizes_with_few_unknowns(sample_vocab):
  _, path = sample_vocab
  tokenizer = tokenization.FullTokenizer(path, do_lower_case=True)
  pieces = unknown = 0
  words = 0
  basic = tokenization.BasicTokenizer(do_lower_case=True)
  for line in corpus.iter_lines(SAMPLE, "strict", corpus.ReadReport()):
    tokens = tokenizer.tokenize(line)
    pieces += len(tokens)
    unknown += tokens.count("[UNK]")
    words += len(basic.tokenize(line))
  assert pieces > 150_000
  assert unknown / pieces < 1e-3
  # A 5,000-piece vocab learned on the text itself splits few words.
  assert pieces / words < 1.25


@pytest.mark.slow
def test_unknown_rate_agrees_with_the_tokenizer(sample_counts, sample_vocab):
  vocab, _ = sample_vocab
  stats = build_vocab.unknown_rate(sample_counts, vocab)
  assert stats["words"] == sum(sample_counts.values())
  assert stats["unk_fraction"] < 1e-3
  assert 1.0 <= stats["wordpieces_per_word"] < 1.25


@pytest.mark.slow
def test_deterministic_whatever_the_count_order(sample_counts):
  # 800 words and 600 slots: the learner's threshold search takes several tries, as on the
  # whole sample, at a fifth of the cost.
  small = collections.Counter(dict(sample_counts.most_common(800)))
  reordered = collections.Counter(dict(reversed(list(small.items()))))
  a = build_vocab.build_vocab(small, vocab_size=600, num_unused=10)
  b = build_vocab.build_vocab(reordered, vocab_size=600, num_unused=10)
  assert a == b and len(a) == 600
  assert sum(not token.startswith("[") for token in a) > 500  # learned, not topped up


def test_tops_up_with_unused_slots_when_the_corpus_is_small():
  counts = collections.Counter({"abc": 50, "abd": 40, "b": 30})
  vocab = build_vocab.build_vocab(counts, vocab_size=40, num_unused=2)
  assert len(vocab) == 40
  assert vocab[:7] == ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  assert {"a", "b", "c", "d", "##b", "##c", "##d"} <= set(vocab)
  assert vocab[-1].startswith("[unused") and "[unused2]" in vocab


def test_too_small_vocab_size_is_a_clear_error():
  with pytest.raises(ValueError, match="--vocab_size=50 leaves no room"):
    build_vocab.build_vocab({"a": 1}, vocab_size=50, num_unused=994)


def _run_cli(*args):
  return subprocess.run([sys.executable, os.path.join(REPO_ROOT, "data_prep", "build_vocab.py"),
                         *args], capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)


@pytest.mark.slow
def test_cli_writes_vocab_and_refuses_to_overwrite(tmp_path):
  text = tmp_path / "corpus.txt"
  text.write_text("The cat sat on the mat.\nThe dog sat too!\n\nCats and dogs.\n",
                  encoding="utf-8")
  out = tmp_path / "vocab.txt"
  run = _run_cli(f"--input_file={text}", f"--vocab_file={out}", "--vocab_size=120",
                 "--num_unused=5")
  assert run.returncode == 0, run.stderr
  assert "wrote" in run.stdout and "[UNK] 0.000% of wordpieces" in run.stdout
  vocab = out.read_text(encoding="utf-8").splitlines()
  assert len(vocab) == 120 and "cat" in vocab and "##s" in vocab
  assert sorted(os.listdir(tmp_path)) == ["corpus.txt", "vocab.txt"]
  again = _run_cli(f"--input_file={text}", f"--vocab_file={out}", "--vocab_size=120")
  assert again.returncode == 1 and "pass --overwrite" in again.stderr


@pytest.mark.slow
def test_cli_errors_name_the_flag_file_and_line(tmp_path):
  missing = _run_cli(f"--input_file={tmp_path}/nothing-*.txt", f"--vocab_file={tmp_path}/v.txt")
  assert missing.returncode == 1 and "--input_file: no file matches" in missing.stderr
  bad = tmp_path / "bad.txt"
  bad.write_bytes(b"fine line\nbroken \xff\xfe line\n")
  run = _run_cli(f"--input_file={bad}", f"--vocab_file={tmp_path}/v.txt", "--vocab_size=200",
                 "--num_unused=0")
  assert run.returncode != 0
  assert f"{bad}:2: invalid UTF-8" in run.stderr
  assert not os.path.exists(tmp_path / "v.txt")
  skipped = _run_cli(f"--input_file={bad}", f"--vocab_file={tmp_path}/v.txt", "--vocab_size=200",
                     "--num_unused=0", "--errors=skip")
  assert skipped.returncode == 0, skipped.stderr
