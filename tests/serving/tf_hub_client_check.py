"""TensorFlow's "classify text with BERT" pattern on our exports, through TF Hub's own client.

Run by tests/serving/test_tf_hub.py in a fresh process that never imports bert_tf:
  python tests/serving/tf_hub_client_check.py SPEC_JSON OUTPUT_DIR

SPEC_JSON: {"preprocessor": dir, "encoder": dir, "text": dir, "classifier": dir,
"texts": [...], "texts_b": [...], "labels": [0/1 per text], "seq_lengths": [...]}.
Like a user of TF Hub it imports tensorflow, tensorflow_text, tensorflow_hub and tf.keras with
TF_USE_LEGACY_KERAS=1 (tf_keras: what hub.KerasLayer is built on), and:
  1. builds Input(string) -> hub.KerasLayer(preprocessor) -> hub.KerasLayer(encoder,
     trainable=True) -> Dropout -> Dense, fits it for a few steps, saves it as a SavedModel and
     reloads it (the tutorial's last step);
  2. does the same with hub.KerasLayer(text model, trainable=True) and with
     hub.KerasLayer(classifier, trainable=True);
  3. records the preprocessor's call, tokenize + bert_pack_inputs (single texts and pairs, at
     several lengths, through hub.KerasLayer too) and the encoder's outputs with training False
     and True.
Writes OUTPUT_DIR/outputs.npz and OUTPUT_DIR/report.json (weights changed by fit, trainable
weight counts, the reloaded model's predictions, the bert_tf modules found loaded).
"""

import json
import os
import sys

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top
import tensorflow_hub as hub  # pylint: disable=g-import-not-at-top
import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import

keras = tf.keras
STEPS = 5


def changed(before, layer):
  """How many of the layer's trainable weights fit changed."""
  return sum(int(not np.array_equal(b, w.numpy())) for b, w in zip(before, layer.trainable_weights))


def fit(model, layer, x, y, loss, learning_rate=1e-3):
  """Fits for STEPS full-batch steps; returns weight counts and the loss (dropout off) before
  and after."""
  before = [w.numpy().copy() for w in layer.trainable_weights]
  model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss=loss)
  loss_before = float(model.evaluate(x, y, batch_size=len(y), verbose=0))
  model.fit(x, y, batch_size=len(y), epochs=STEPS, verbose=0)
  return dict(trainable=len(layer.trainable_weights), changed=changed(before, layer),
              non_trainable=len(layer.non_trainable_weights),
              loss_before=loss_before,
              loss_after=float(model.evaluate(x, y, batch_size=len(y), verbose=0)))


def main(spec_file, output_dir):
  with open(spec_file) as f:
    spec = json.load(f)
  texts = tf.constant(spec["texts"])
  texts_b = tf.constant(spec["texts_b"])
  labels = np.array(spec["labels"], np.float32)
  outputs, report = {}, {}
  keras.utils.set_random_seed(1)

  # 1. The tutorial: preprocessor and encoder as Keras layers, a head, fit, save, reload.
  text_input = keras.layers.Input(shape=(), dtype=tf.string, name="text")
  preprocessing = hub.KerasLayer(spec["preprocessor"], name="preprocessing")
  encoder = hub.KerasLayer(spec["encoder"], trainable=True, name="BERT_encoder")
  net = encoder(preprocessing(text_input))["pooled_output"]
  net = keras.layers.Dropout(0.1)(net)
  net = keras.layers.Dense(1, name="classifier")(net)
  model = keras.Model(text_input, net)
  report["encoder_fit"] = fit(model, encoder, texts, labels,
                              keras.losses.BinaryCrossentropy(from_logits=True))
  outputs["model/predictions"] = model(texts).numpy()
  saved = os.path.join(output_dir, "classifier_model")
  model.save(saved, include_optimizer=False)
  reloaded = tf.saved_model.load(saved)
  outputs["model/reloaded_predictions"] = reloaded(texts).numpy()

  # 3. The preprocessor's three entry points, and the encoder with training False / True.
  preprocessor = hub.load(spec["preprocessor"])
  for key, value in preprocessor(texts).items():
    outputs[f"call/{key}"] = value.numpy()
  tokens = preprocessor.tokenize(texts)
  tokens_b = preprocessor.tokenize(texts_b)
  outputs["tokenize/values"] = tokens.flat_values.numpy()
  outputs["tokenize/word_splits"] = tokens.values.row_splits.numpy()
  outputs["tokenize/text_splits"] = tokens.row_splits.numpy()
  report["tokenize_dtype"] = tokens.dtype.name
  report["tokenize_ragged_rank"] = tokens.ragged_rank
  for seq_length in spec["seq_lengths"]:
    for name, segments in (("single", [tokens]), ("pair", [tokens, tokens_b])):
      packed = preprocessor.bert_pack_inputs(segments, seq_length=seq_length)
      for key, value in packed.items():
        outputs[f"pack/{name}/{seq_length}/{key}"] = value.numpy()
  # The default length, and rank-1 segments ([B, (tokens)]).
  packed = preprocessor.bert_pack_inputs([tokens.merge_dims(1, 2)])
  for key, value in packed.items():
    outputs[f"pack/default/{key}"] = value.numpy()
  # tokenize and bert_pack_inputs as Keras layers (the tutorial's text-pair recipe).
  pair_inputs = [keras.layers.Input(shape=(), dtype=tf.string) for _ in range(2)]
  tokenize = hub.KerasLayer(preprocessor.tokenize)
  pack = hub.KerasLayer(preprocessor.bert_pack_inputs,
                        arguments=dict(seq_length=spec["seq_lengths"][0]))
  pair_model = keras.Model(pair_inputs, pack([tokenize(t) for t in pair_inputs]))
  for key, value in pair_model([texts, texts_b]).items():
    outputs[f"pack_layers/{key}"] = value.numpy()

  loaded_encoder = hub.load(spec["encoder"])
  encoder_inputs = preprocessor(texts)
  for training in (False, True):
    result = loaded_encoder(encoder_inputs, training=training)
    outputs[f"encoder/{training}/pooled_output"] = result["pooled_output"].numpy()
    outputs[f"encoder/{training}/sequence_output"] = result["sequence_output"].numpy()
    outputs[f"encoder/{training}/encoder_outputs"] = np.stack(
        [v.numpy() for v in result["encoder_outputs"]], axis=1)
  report["encoder_attributes"] = dict(
      variables=len(loaded_encoder.variables),
      trainable_variables=len(loaded_encoder.trainable_variables),
      regularization_losses=len(loaded_encoder.regularization_losses))

  # 2. The text model and the fine-tuned classifier as trainable text-in layers.
  text_layer = hub.KerasLayer(spec["text"], trainable=True)
  net = keras.layers.Dense(1)(text_layer(text_input)["pooled_output"])
  report["text_fit"] = fit(keras.Model(text_input, net), text_layer, texts, labels,
                           keras.losses.BinaryCrossentropy(from_logits=True))

  classifier_layer = hub.KerasLayer(spec["classifier"], trainable=True)
  classifier_model = keras.Model(text_input, classifier_layer(text_input)["logits"])
  outputs["classifier/logits_before"] = classifier_model(texts).numpy()
  report["classifier_fit"] = fit(
      classifier_model, classifier_layer, texts, labels.astype(np.int32),
      keras.losses.SparseCategoricalCrossentropy(from_logits=True), learning_rate=1e-4)
  classifier = hub.load(spec["classifier"])
  pair = classifier(dict(text=texts, text_b=texts_b))
  outputs["classifier/pair_probabilities"] = pair["probabilities"].numpy()

  report["bert_tf_modules"] = sorted(m for m in sys.modules if m.split(".")[0] == "bert_tf")
  np.savez(os.path.join(output_dir, "outputs.npz"), **outputs)
  with open(os.path.join(output_dir, "report.json"), "w") as f:
    json.dump(report, f, indent=2)


if __name__ == "__main__":
  main(*sys.argv[1:])
