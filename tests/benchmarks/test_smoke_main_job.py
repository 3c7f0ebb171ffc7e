"""The smoke run of benchmarks/main_job.py: one run of the README's main job
(data_prep/run_sample.py) with 20 pretraining steps, its ten fine-tuning runs unchanged: about three
minutes on 2 cores, so it runs with BERT_TF_LONG_SMOKE=1 (smoke.LONG); its own file, so the
runner gives it a worker of its own. Twenty steps leave the masked-LM plateau unreached, so the
test checks that every figure of the summary is there and in range, not that pretraining
helped."""

import pytest

from tests.benchmarks import smoke


@smoke.LONG
@pytest.mark.slow(weight=12)  # about three minutes: the job's commands, each a process
def test_main_job(tmp_path):
  out, content = smoke.run("main_job", tmp_path, own_layout=True)
  assert "smoke: one run of the job with 20 pretraining steps" in out
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
  assert summary["fine_tuning_seeds"] == [1, 2, 3, 4, 5]
  assert len(summary["seed_differences"]) == len(summary["dev_accuracies_pretrained"]) == 5
  assert "minilm" not in content and content["machine"]["cpus"] >= 1
