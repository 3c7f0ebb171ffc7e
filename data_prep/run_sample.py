"""Runs the whole pipeline on the bundled sample corpus, step by step, with the real commands.

Learns a vocab, tokenizes the sample, makes pretraining records, pretrains a tiny BERT for a few
steps with evaluation and export, queries the exported TF Serving text model, then fine-tunes the
pretrained model with run_classifier on a task made from the sample (is a line dialogue or
narration? labelled by its quotation marks, which are then removed) and asks its exported raw-text
classifier.

  python data_prep/run_sample.py [--output_dir=sample_output]

Each step is the documented CLI run as a subprocess, printed before it runs, so what this does is
exactly what a user would type. Outputs go to --output_dir (default: sample_output/ in the
current directory), replaced on each run.
"""

import argparse
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
SAMPLE = os.path.join(HERE, "sample", "sample_text.txt")
TRAIN_STEPS = 150  # a couple of minutes on a laptop CPU; enough to see the loss fall

# Loads an exported text model the way a server does (no bert_tf import) and fills a mask.
QUERY_EXPORT = """
import sys
import tensorflow as tf
import tensorflow_text  # registers the tokenizer ops
model = tf.saved_model.load(sys.argv[1])
text = "she was the youngest of the two [MASK] of a most affectionate father."
out = model.signatures["fill_mask"](text=tf.constant([text]))
tokens = [t.decode() for t in out["top_tokens"].numpy()[0, 0]]
probs = out["top_probabilities"].numpy()[0, 0]
print(text)
print("  [MASK] ->", ", ".join(f"{t} ({p:.3f})" for t, p in zip(tokens, probs)))
"""

# Loads the exported classifier the way a server does and classifies two sentences.
QUERY_CLASSIFIER = """
import sys
import tensorflow as tf
import tensorflow_text  # registers the tokenizer ops
model = tf.saved_model.load(sys.argv[1])
texts = ["I cannot agree with you, papa; you know I cannot.",
         "The real evils of Emma's situation were the power of having rather too much her own way."]
out = model.signatures["serving_default"](text=tf.constant(texts))
for text, label, p in zip(texts, out["label"].numpy(), out["probabilities"].numpy()):
  print(f"  {text!r}: {label.decode()} (P(dialogue) = {p[0]:.3f})")
"""
TASK_EXAMPLES = {"train": 1024, "dev": 256, "test": 64}


def write_dialogue_task(sample, output_dir, seed=12345):
  """A labelled-by-construction task from the sample: is a line spoken (it holds a quotation
  mark) or narration? The quotation marks are removed, so the model has to tell from the
  words. TSV files with a header: sentence, label (dialogue / narration), balanced."""
  by_label = {"dialogue": [], "narration": []}
  with open(sample, encoding="utf-8") as f:
    for line in f:
      line = line.strip()
      text = line.replace('"', "").strip()
      if len(text.split()) >= 4:
        by_label["dialogue" if '"' in line else "narration"].append(text.replace("\t", " "))
  rng = random.Random(seed)
  for texts in by_label.values():
    rng.shuffle(texts)
  os.makedirs(output_dir, exist_ok=True)
  start = 0
  for split, count in TASK_EXAMPLES.items():
    rows = [(text, label) for label, texts in by_label.items()
            for text in texts[start:start + count // 2]]
    start += count // 2
    rng.shuffle(rows)
    with open(os.path.join(output_dir, f"{split}.tsv"), "w", encoding="utf-8") as f:
      f.write("sentence\tlabel\n")
      f.writelines(f"{text}\t{label}\n" for text, label in rows)


def run_step(title, args):
  print(f"\n=== {title}\n$ {' '.join(shlex.quote(a) for a in args)}", flush=True)
  started = time.time()
  result = subprocess.run(args)
  if result.returncode != 0:
    sys.exit(f"run_sample: step '{title}' failed with exit code {result.returncode}")
  print(f"({title}: {time.time() - started:.1f} s)", flush=True)


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--output_dir", default="sample_output")
  args = parser.parse_args()
  os.makedirs(args.output_dir, exist_ok=True)
  vocab = os.path.join(args.output_dir, "vocab.txt")
  python = sys.executable

  run_step("learn a WordPiece vocab from the sample", [
      python, os.path.join(HERE, "build_vocab.py"), f"--input_file={SAMPLE}",
      f"--vocab_file={vocab}", "--vocab_size=8000", "--do_lower_case=True", "--overwrite"])
  run_step("tokenize the sample with it", [
      python, os.path.join(HERE, "tokenize_text.py"), f"--input_file={SAMPLE}",
      f"--vocab_file={vocab}", "--do_lower_case=True",
      f"--output_file={os.path.join(args.output_dir, 'sample_tokens.txt')}", "--overwrite"])
  records = os.path.join(args.output_dir, "pretraining_data.tfrecord")
  run_step("make masked-LM / next-sentence pretraining records", [
      python, os.path.join(HERE, "create_pretraining_data.py"), f"--input_file={SAMPLE}",
      f"--output_file={records}",
      f"--vocab_file={vocab}", "--do_lower_case=True", "--max_seq_length=128",
      "--max_predictions_per_seq=20", "--dupe_factor=2", "--overwrite"])

  # A tiny BERT whose vocab_size is the learned vocab's.
  with open(os.path.join(REPO_ROOT, "configs", "bert_config_tiny.json")) as f:
    config = json.load(f)
  with open(vocab, encoding="utf-8") as f:
    config["vocab_size"] = sum(1 for _ in f)
  config_file = os.path.join(args.output_dir, "bert_config.json")
  with open(config_file, "w") as f:
    json.dump(config, f, indent=2, sort_keys=True)
  train_dir = os.path.join(args.output_dir, "pretraining")
  shutil.rmtree(train_dir, ignore_errors=True)  # otherwise the run would resume the last one
  run_step("pretrain a tiny BERT for a few steps, evaluate and export it", [
      python, "-m", "bert_tf.run_pretraining", f"--bert_config_file={config_file}",
      f"--input_file={records}", f"--output_dir={train_dir}", f"--vocab_file={vocab}",
      "--do_lower_case=True", "--do_train", "--do_eval", "--train_batch_size=32",
      f"--num_train_steps={TRAIN_STEPS}", "--num_warmup_steps=15", "--learning_rate=1e-3",
      "--save_checkpoints_steps=50", "--iterations_per_loop=25", "--max_eval_steps=10"])
  with open(os.path.join(train_dir, "eval_results.txt")) as f:
    print("eval_results.txt:\n" + f.read())
  text_model = os.path.join(train_dir, "export", str(TRAIN_STEPS), "serving", "bert", "1")
  run_step("ask the exported text model (TensorFlow + tensorflow-text only) to fill a mask", [
      python, "-c", QUERY_EXPORT, text_model])

  task_dir = os.path.join(args.output_dir, "dialogue_task")
  write_dialogue_task(SAMPLE, task_dir)
  print(f"\nWrote a classification task from the sample to {task_dir}/ (train/dev/test.tsv: "
        "sentence, label = dialogue or narration, quotation marks removed)")
  classifier_dir = os.path.join(args.output_dir, "classifier")
  shutil.rmtree(classifier_dir, ignore_errors=True)
  run_step("fine-tune the pretrained model on it: train, evaluate, predict, export", [
      python, "-m", "bert_tf.run_classifier", "--task_name=generic", f"--data_dir={task_dir}",
      "--text_a_column=sentence", "--label_column=label",
      f"--init_checkpoint={train_dir}", f"--bert_config_file={config_file}",
      f"--vocab_file={vocab}", "--do_lower_case=True", "--do_train", "--do_eval",
      "--do_predict", "--max_seq_length=64", "--train_batch_size=32", "--learning_rate=1e-4",
      "--num_train_epochs=3", "--iterations_per_loop=16", f"--output_dir={classifier_dir}"])
  with open(os.path.join(classifier_dir, "eval_results.txt")) as f:
    print("eval_results.txt:\n" + f.read())
  print("(A tiny BERT pretrained for a few steps on 900 KB is still in the phase where it predicts\n"
        " frequent words whatever the input (masked-LM accuracy about 6%), so fine-tuning from it\n"
        " stays near chance here. With real pretrained weights the same command learns the task;\n"
        " see the README's fine-tuning section.)")
  steps = int(TASK_EXAMPLES["train"] / 32 * 3)
  run_step("ask the exported classifier (TensorFlow + tensorflow-text only)", [
      python, "-c", QUERY_CLASSIFIER,
      os.path.join(classifier_dir, "export", "classifier", str(steps))])
  print(f"\nSample pipeline done; outputs are in {args.output_dir}/")


if __name__ == "__main__":
  main()
