"""Smoke runs of the fine-tuning benchmarks (finetuning.py, squad.py): the tiny preset, one round
of one step, ours against Model Garden (Hugging Face left out, with a printed line), the data
steps on a few examples (tests/benchmarks/smoke.py). The figures are timings: the tests check
the rows, the records' equality lines and the results file, not the speeds."""

import pytest

from tests.benchmarks import smoke

pytestmark = pytest.mark.slow(weight=2)  # 25-30 s each: TensorFlow, Model Garden, tiny models


def _systems(results, measurement):
  return [row["system"] for row in results["rows"] if row["measurement"] == measurement]


def test_finetuning(tmp_path):
  out, results = smoke.run("finetuning", tmp_path)
  assert "smoke: hf_torch left out (it needs torch and transformers" in out
  assert "conversion: the 50 records of both converters are identical" in out
  assert "| measurement | system | examples/s | ours / this | goal |" in out
  assert _systems(results, "fine-tune tiny") == ["ours (bert_tf loop.Trainer)",
                                                 "Model Garden BertClassifier"]
  assert len(_systems(results, "tagging tiny")) == 2
  assert len(_systems(results, "extract_features tiny, 8 lines")) == 3
  assert results["settings"].startswith("batch 4, sequence 32,")


def test_squad(tmp_path):
  out, results = smoke.run("squad", tmp_path)
  assert "smoke: hf_torch left out" in out
  assert "post-processing v2: the JSON files of both sides are identical" in out
  measurements = [row["measurement"] for row in results["rows"]]
  assert measurements[0].startswith("conversion, 40 questions")
  assert _systems(results, "fine-tune tiny, seq 32") == [
      "ours (bert_tf loop.Trainer, build_span_model)", "Model Garden BertSpanLabeler"]
