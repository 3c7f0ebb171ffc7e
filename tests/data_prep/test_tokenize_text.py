"""tokenize_text CLI: output lines equal the tokenizer's, atomic output, clear errors."""

import os
import subprocess
import sys

import pytest

from bert_tf import tokenization
from tests import helpers

REPO_ROOT = helpers.REPO_ROOT
VOCAB = os.path.join(REPO_ROOT, "tests", "data", "vocab_uncased.txt")
SCRIPT = os.path.join(REPO_ROOT, "data_prep", "tokenize_text.py")

TEXT = ("Héllo, WORLD! The quick brown fox.\n"
        "中文字符 and naïve café\n"
        "\n"
        "supercalifragilisticexpialidocious\n")


def _run(*args):
  return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                        timeout=300)


@pytest.mark.slow
def test_tokens_and_ids_match_the_tokenizer(tmp_path):
  src = tmp_path / "in.txt"
  src.write_text(TEXT, encoding="utf-8")
  tokenizer = tokenization.FullTokenizer(VOCAB, do_lower_case=True)
  expected = [tokenizer.tokenize(line) for line in TEXT.splitlines()]
  assert expected[0][:4] == ["hello", ",", "world", "!"]
  assert expected[2] == []

  out = tmp_path / "tokens.txt"
  run = _run(f"--input_file={src}", f"--vocab_file={VOCAB}", f"--output_file={out}")
  assert run.returncode == 0, run.stderr
  assert [line.split() for line in out.read_text(encoding="utf-8").splitlines()] == expected
  pieces = sum(map(len, expected))
  unknown = sum(t.count("[UNK]") for t in expected)
  assert unknown >= 1  # a CJK character missing from the English vocab
  assert f"4 lines, {pieces} wordpieces, [UNK] {100 * unknown / pieces:.3f}%" in run.stdout

  ids_out = tmp_path / "ids.txt"
  run = _run(f"--input_file={src}", f"--vocab_file={VOCAB}", f"--output_file={ids_out}",
             "--output_ids")
  assert run.returncode == 0, run.stderr
  got = [[int(t) for t in line.split()] for line in ids_out.read_text().splitlines()]
  assert got == [tokenizer.convert_tokens_to_ids(t) for t in expected]


@pytest.mark.slow
def test_errors_leave_no_output(tmp_path):
  bad = tmp_path / "bad.txt"
  bad.write_bytes(b"ok\nok\n\xc3\x28 broken\n")
  out = tmp_path / "tokens.txt"
  run = _run(f"--input_file={bad}", f"--vocab_file={VOCAB}", f"--output_file={out}")
  assert run.returncode == 1 and f"{bad}:3: invalid UTF-8" in run.stderr
  assert os.listdir(tmp_path) == ["bad.txt"]

  novocab = _run(f"--input_file={bad}", f"--vocab_file={tmp_path}/none.txt",
                 f"--output_file={out}")
  assert novocab.returncode != 0 and "none.txt" in novocab.stderr
  assert "Traceback" not in novocab.stderr


def test_what_reading_changed_is_said(tmp_path, caplog):
  """tokenize_text warns, as create_pretraining_data and build_vocab do, of lines whose "\\r"
  was deleted (joining the text either side) and of lines that were not UTF-8."""
  from bert_tf.data import corpus  # pylint: disable=g-import-not-at-top
  src = tmp_path / "in.txt"
  src.write_bytes(b"hello\rworld\nok\ncaf\xe9\n")
  out = tmp_path / "out.txt"
  tokenizer = tokenization.FullTokenizer(VOCAB, do_lower_case=True)
  with open(out, "w", encoding="utf-8") as f, caplog.at_level("WARNING"):
    stats = corpus.tokenize_files([str(src)], tokenizer, f, errors="replace")
  assert stats["lines"] == 3
  assert out.read_text(encoding="utf-8").splitlines()[0] == "hello ##world"
  assert "1 line(s) hold a carriage return (\\r) inside their text" in caplog.text
  assert "1 line(s) were not valid UTF-8 (decoded with U+FFFD)" in caplog.text
