"""The smoke run of benchmarks/main_job.py: one run of the README's main job
(data_prep/run_sample.py) with 20 pretraining steps and fine-tuning seeds 1 and 2 (four
fine-tuning runs): about a minute on 2 cores; its own file, so the runner gives it a
worker of its own. Twenty steps leave the masked-LM plateau unreached, so the
test checks that every figure of the summary is there and in range, not that pretraining
helped."""

import pytest

from tests.benchmarks import smoke


@pytest.mark.slow(weight=8)  # about a minute: the job's commands, each a process
def test_main_job(tmp_path):
  out, content = smoke.run("main_job", tmp_path, own_layout=True)
  assert "smoke: one run of the job with 20 pretraining steps and fine-tuning seeds 1,2" in out
  assert ("| run | wall time | masked-LM accuracy | dev accuracy: pretrained (mean of the seeds) |"
          in out)
  (run,) = content["runs"]
  summary = run["summary"]
  assert summary["pretraining_steps"] == 20
  for key in ("dev_accuracy_pretrained", "dev_accuracy_random_init", "masked_lm_accuracy"):
    assert 0 <= summary[key] <= 1, key
  assert summary["difference"] == pytest.approx(
      summary["dev_accuracy_pretrained"] - summary["dev_accuracy_random_init"])
  assert summary["standard_error_difference"] > 0
  assert summary["fine_tuning_seeds"] == [1, 2]
  assert len(summary["seed_differences"]) == len(summary["dev_accuracies_pretrained"]) == 2
  # Two seeds: the sample standard deviation of the two differences over sqrt(2).
  first, second = summary["seed_differences"]
  assert summary["standard_error_seeds"] == pytest.approx(abs(first - second) / 2)
  assert "minilm" not in content and content["machine"]["cpus"] >= 1
