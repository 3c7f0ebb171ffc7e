"""Smoke runs of the text benchmarks (tokenizers, pretraining data): each script's --smoke runs
from a clone in seconds, prints its table and writes its results file (tests/benchmarks/smoke.py).
The figures are timings, so the tests check the rows and the counts, not the speeds."""

import pytest

from tests.benchmarks import smoke

pytestmark = pytest.mark.slow  # subprocesses (1-8 s each here)


def test_reference_tokenizer_speed(tmp_path):
  out, results = smoke.run("reference_tokenizer_speed", tmp_path)
  assert "file                     tokenizer" in out
  names = [row["tokenizer"] for row in results["rows"]]
  assert names == ["bert_tf tokenize", "bert_tf tokenize_to_ids", "bert_tf BasicTokenizer",
                   "naive oracle (full)"]
  assert all(row["lines"] == 200 and row["seconds"] > 0 for row in results["rows"])
  assert results["rows"][-1]["speedup"] == 1.0


def test_tokenization(tmp_path):
  out, results = smoke.run("tokenization", tmp_path)
  assert "| tokenizer | MB/s | wordpieces/s | speed vs original | lines equal to reference |" in out
  (run,) = results["runs"]
  assert run["do_lower_case"] is True and 0.019 < run["megabytes"] < 0.021
  names = [row["tokenizer"] for row in run["rows"]]
  # The Rust tokenizer is in the test extra (tokenizers), so CI times it too.
  assert names == ["original-equivalent (naive Python)", "bert_tf.tokenization.FullTokenizer",
                   "bert_tf.text.InGraphTokenizer", "HF tokenizers BertWordPieceTokenizer (Rust)"]
  assert all(row["lines_equal_to_reference"] == 1.0 for row in run["rows"])


def test_pretraining_data(tmp_path):
  out, results = smoke.run("pretraining_data", tmp_path)
  assert "| input | mode | seed | instances | wall s |" in out
  assert [row["mode"] for row in results["rows"]] == ["reference", "default"]
  for row in results["rows"]:
    assert row["instances"] > 30 and 100 < row["mean_length"] <= 128


def test_beam_pretraining_data(tmp_path):
  out, results = smoke.run("beam_pretraining_data", tmp_path)
  assert "same multiset of records: True" in out
  assert results["same_records"] is True
  assert set(results["runs"]) == {"local mode", "Beam DirectRunner"}
  assert results["runs"]["local mode"]["instances"] == \
      results["runs"]["Beam DirectRunner"]["instances"]
