"""benchmarks/serving.py: its texts, the figures it reports (best round, percentiles, speed
ratios), the equality check that guards the timing, variant flags, and a smoke run of ours."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests import helpers

BENCHMARKS = os.path.join(helpers.REPO_ROOT, "benchmarks")
sys.path.insert(0, BENCHMARKS)
import serving  # pylint: disable=g-import-not-at-top,wrong-import-position


def test_committed_texts_have_the_lengths_they_promise():
  sets = serving.read_sets(serving.SETS)
  bounds = dict(short=(15, 25, 400), medium=(45, 55, 200), long=(95, 110, 160))
  for name, (low, high, count) in bounds.items():
    words = [len(t.split()) for t in sets[name]]
    assert len(words) == count, name
    assert low <= min(words) and max(words) <= high, name
    assert len(set(sets[name])) == count, f"{name}: repeated texts"


def test_make_data_joins_consecutive_sentences_and_abbreviations(tmp_path):
  corpus = tmp_path / "corpus.txt"
  five = "one two three four five"
  # Document 1: "Mr." broken off by the splitter, then joined back; document 2 after a blank line.
  corpus.write_text(f"I saw Mr.\nSmith {five} {five} {five}.\n{five}.\n\n"
                    f"{five} {five} {five} x.\n", encoding="utf-8")
  docs = serving._documents(str(corpus))  # pylint: disable=protected-access
  assert docs == [[f"I saw Mr. Smith {five} {five} {five}.", f"{five}."],
                  [f"{five} {five} {five} x."]]
  # Runs of consecutive sentences reaching 20 words: the first sentence alone has 19, so the
  # run takes the next one (24 words); a 3-word sentence restarts a run.
  assert serving._runs(docs[0], 20, 25) == [" ".join(docs[0])]  # pylint: disable=protected-access
  assert serving._runs(["a b c"] + docs[0], 20, 22) == []  # pylint: disable=protected-access


def test_percentile_and_best_round():
  assert serving.percentile([5, 1, 4, 2, 3], 0.5) == 3
  assert serving.percentile(list(range(1, 201)), 0.99) == 198  # the 3rd highest of 200
  plan = dict(sets=["short"], throughput_batches=[8], sweep_batches=[1, 2])
  rounds = [dict(latency=dict(short=[0.002, 0.004, 0.006]),
                 throughput=dict(short={"8": [0.1, 0.1]}), sweep={"1": [0.003], "2": [0.005]}),
            dict(latency=dict(short=[0.001, 0.003, 0.009]),
                 throughput=dict(short={"8": [0.2, 0.2]}), sweep={"1": [0.004], "2": [0.004]})]
  best = serving.summarize(rounds, plan)
  assert best["short"]["p50_ms"] == pytest.approx(3.0)  # round 2's median
  assert best["short"]["p99_ms"] == pytest.approx(6.0)  # round 1's highest
  assert best["short"]["batch8_per_s"] == pytest.approx(80.0)  # 16 examples in 0.2 s
  assert best["sweep_p50_ms"] == {1: pytest.approx(3.0), 2: pytest.approx(4.0)}
  assert "same_text_p50_ms" not in best["short"]  # rounds of results files before the measure
  rounds[0]["latency_same"] = dict(short=[0.003, 0.003, 0.005])
  rounds[1]["latency_same"] = dict(short=[0.002, 0.004, 0.004])
  best = serving.summarize(rounds, plan)
  assert best["short"]["same_text_p50_ms"] == pytest.approx(3.0)  # round 1's median
  assert best["short"]["same_text_p99_ms"] == pytest.approx(4.0)  # round 2's highest


def test_the_repeated_text_is_the_median_length_of_the_requests():
  import serving_systems  # pylint: disable=g-import-not-at-top
  texts = ["a" * 5, "b" * 1, "c" * 9, "d" * 3, "e" * 7]
  assert serving_systems.median_text(texts, 5) == "a" * 5
  assert serving_systems.median_text(texts, 4) == "d" * 3  # of 5, 1, 9, 3: the lower middle
  assert serving_systems.median_text(texts, 7) == "a" * 5  # wraps: 5, 1, 9, 3, 7, 5, 1


def test_speed_ratio_is_ours_over_the_faster_peer():
  ours = dict(p50_ms=5.0, batch32_per_s=120.0)
  peers = [("ORT", dict(p50_ms=4.0, batch32_per_s=100.0)),
           ("HF", dict(p50_ms=8.0, batch32_per_s=150.0))]
  assert serving.speed_ratio(ours, peers, "p50_ms") == (pytest.approx(0.8), "ORT")
  assert serving.speed_ratio(ours, peers, "batch32_per_s") == (pytest.approx(0.8), "HF")
  assert serving.speed_ratio(ours, [], "p50_ms") == (None, None)


def test_variants_parse_and_bad_ones_are_refused():
  assert serving.parse_variants(["bf16:--serving_precision=bfloat16 --nowarmup"]) == [
      ("default", []), ("bf16", ["--serving_precision=bfloat16", "--nowarmup"])]
  for bad in ("no_colon", ":--x", "default:--x", "a b:--x"):
    with pytest.raises(SystemExit, match="NAME:EXTRA_EXPORT_FLAGS"):
      serving.parse_variants([bad])


def test_existing_exports_parse_and_bad_ones_are_refused(tmp_path):
  (tmp_path / "saved_model.pb").write_bytes(b"")
  assert serving.parse_exports([f"before:{tmp_path}"]) == [("before", str(tmp_path))]
  for bad in ("no_colon", f":{tmp_path}", f"default:{tmp_path}", f"a b:{tmp_path}"):
    with pytest.raises(SystemExit, match="expected NAME:FOLDER"):
      serving.parse_exports([bad])
  with pytest.raises(SystemExit, match="holds no saved_model.pb"):
    serving.parse_exports([f"empty:{tmp_path / 'nothing'}"])

def test_an_export_flag_bert_tf_lacks_stops_the_run_naming_it(tmp_path):
  with pytest.raises(SystemExit, match="has no flag --no_such_export_flag"):
    serving.export_ours(str(tmp_path), str(tmp_path), "future", ["--no_such_export_flag=1"], 64)


def test_a_peer_whose_libraries_are_missing_is_skipped_with_the_reason(monkeypatch, tmp_path):
  monkeypatch.setattr(serving, "missing_modules",
                      lambda system: ["onnxruntime"] if system == "onnxruntime" else ["torch"])
  args = serving.parse_args(["--smoke"])
  rows, skipped, _ = serving.prepare(args, str(tmp_path), str(tmp_path),
                                     ["onnxruntime", "hf_torch"])
  assert rows == []
  assert skipped == {"ONNX Runtime": "onnxruntime not installed",
                     "Hugging Face PyTorch": "torch not installed"}


class _Checked:
  """What check_outputs reads of a worker."""

  def __init__(self, tmp_path, row, system, **arrays):
    self.row, self.system = row, system
    self.check_file = str(tmp_path / f"{system}.npz")
    np.savez(self.check_file, **arrays)


def _outputs(shift=0.0, lengths=(3, 2)):
  rng = np.random.default_rng(0)
  return dict(lengths=np.array(lengths), pooled=rng.normal(size=(2, 4)) + shift,
              sequence_0=rng.normal(size=(lengths[0], 4)) + shift,
              sequence_1=rng.normal(size=(lengths[1], 4)))


def test_equality_check_compares_with_hugging_face_and_stops_on_a_difference(tmp_path):
  hf = _Checked(tmp_path, "Hugging Face PyTorch", "hf_torch", **_outputs())
  close = _Checked(tmp_path, "ours", "ours", **_outputs(shift=1e-5))
  result = serving.check_outputs([close, hf], 1e-3, {}, None)
  assert result["ours"]["against"] == "Hugging Face PyTorch"
  assert result["ours"]["pooled_output"] == pytest.approx(1e-5, rel=1e-3)
  assert result["Hugging Face PyTorch"] == "the reference"
  alone = serving.check_outputs([close], 1e-3, {}, None)  # nothing to compare with: said so
  assert alone == {"ours": "the reference: no peer ran, so nothing was compared"}
  far = _Checked(tmp_path, "ours: bf16", "ours", **_outputs(shift=0.01))
  with pytest.raises(SystemExit, match="outputs disagree .ours: bf16."):
    serving.check_outputs([far, hf], 1e-3, {}, None)
  assert serving.check_outputs([far, hf], 1e-3, {"bf16": 0.02}, None)  # its own tolerance
  cut = _Checked(tmp_path, "ONNX Runtime", "onnxruntime", **_outputs(lengths=(3, 1)))
  with pytest.raises(SystemExit, match="outputs disagree"):
    serving.check_outputs([cut, hf], 1e-3, {}, None)


@pytest.mark.slow
def test_smoke_run_of_ours(tmp_path):
  """The --smoke run CI can afford: a tiny random BERT exported by bert_tf.export and timed
  from raw text, one thread, short text, beside the Python tokenizer feeding the encoder export
  (whose outputs the check holds to the text model's); the results file holds every figure."""
  command = [sys.executable, os.path.join(BENCHMARKS, "serving.py"), "--smoke",
             "--systems=ours,ours_python_tokenizer", "--threads=1", "--sets=short",
             f"--output_dir={tmp_path}", f"--work_dir={tmp_path / 'work'}"]
  done = subprocess.run(command, capture_output=True, text=True, env=helpers.subprocess_env(),
                        cwd=helpers.REPO_ROOT, timeout=600, check=False)
  assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
  assert "| ours |" in done.stdout
  (path,) = [p for p in os.listdir(tmp_path) if p.endswith(".json")]
  with open(tmp_path / path, encoding="utf-8") as f:
    results = json.load(f)
  cells = results["summary"]["1"]["ours"]["short"]
  assert 0 < cells["p50_ms"] <= cells["p99_ms"]
  assert cells["batch8_per_s"] > 0 and cells["batch32_per_s"] > 0
  rounds = results["raw"]["1"]["ours"]["rounds"]
  assert len(rounds) == 1 and len(rounds[0]["latency"]["short"]) == 8
  assert len(rounds[0]["latency_same"]["short"]) == 8  # one text, as many requests
  assert 0 < cells["same_text_p50_ms"] <= cells["same_text_p99_ms"]
  assert results["lengths"]["short"]["texts"] == 400
  assert results["check"]["1"]["ours"] == "the reference: no peer ran, so nothing was compared"
  python_row = results["check"]["1"]["ours: Python tokenizer + encoder export"]
  assert python_row["against"] == "ours" and python_row["sequence_output"] < 1e-4
  assert results["summary"]["1"]["ours: Python tokenizer + encoder export"]["short"]["p50_ms"] > 0
