"""--init_layers: which encoder layers of a deeper --init_checkpoint a shallower model takes."""

import numpy as np
import pytest

from bert_tf.model import checkpoints
from bert_tf.training import layer_selection
from bert_tf.training import loop
from bert_tf.training.errors import TrainingError
from bert_tf.tasks.classifier import head as classifier_head
from tests.helpers import random_original_weights, tiny_config


def test_evenly_spaced_layers_are_distilberts():
  assert layer_selection.evenly_spaced(6, 12) == [0, 2, 4, 7, 9, 11]  # DistilBERT's
  assert layer_selection.evenly_spaced(3, 6) == [0, 3, 5]
  assert layer_selection.evenly_spaced(4, 12) == [0, 4, 7, 11]
  assert layer_selection.evenly_spaced(1, 12) == [0]
  assert layer_selection.chosen_layers("first", 3, 6) == [0, 1, 2]
  assert layer_selection.chosen_layers("1,2,5", 3, 6) == [1, 2, 5]
  assert layer_selection.chosen_layers("even", 4, 2) == [0, 1]  # a shallower checkpoint


@pytest.mark.parametrize("value, message", [
    ("2,1", "must increase"), ("0,x", "layer numbers from 0"), ("0,6", "name 2 of them"),
    ("0", "name 2 of them")])
def test_bad_values_are_refused_naming_the_flag(value, message):
  with pytest.raises(layer_selection.InitLayersError, match=f"--init_layers={value}: .*"
                     f"{message}"):
    layer_selection.chosen_layers(value, 2, 6)


def test_selected_layers_are_renamed_and_the_others_dropped():
  values = {"bert/encoder/layer_3/output/dense/bias": 3, "bert/encoder/layer_1/x": 1,
            "bert/embeddings/word_embeddings": "e", "bert/encoder/layer_13/x": 13}
  assert layer_selection.select_layers(values, [1, 3]) == {
      "bert/encoder/layer_1/output/dense/bias": 3, "bert/encoder/layer_0/x": 1,
      "bert/embeddings/word_embeddings": "e"}


@pytest.mark.parametrize("init_layers, expected", [
    (None, [0, 3]), ("even", [0, 3]), ("first", [0, 1]), ("1,2", [1, 2])])
def test_a_two_layer_model_takes_the_chosen_layers_of_a_four_layer_checkpoint(
    tmp_path, init_layers, expected):
  deep = tiny_config(num_hidden_layers=4)
  values = random_original_weights(deep, np.random.default_rng(0))
  path = checkpoints.write_tf1_checkpoint(values, str(tmp_path / "model.ckpt"))
  model = classifier_head.build_classifier_model(tiny_config(num_hidden_layers=2), 3)
  restored = loop.load_init_checkpoint(model, path, init_layers)
  loaded = checkpoints.get_original_weights(model)
  for mine, theirs in enumerate(expected):
    name = f"bert/encoder/layer_{mine}/attention/self/query/kernel"
    np.testing.assert_array_equal(loaded[name], values[name.replace(f"layer_{mine}",
                                                                    f"layer_{theirs}")])
  np.testing.assert_array_equal(loaded["bert/embeddings/word_embeddings"],
                                values["bert/embeddings/word_embeddings"])
  assert any("layer_1" in path for path in restored)


def test_an_init_layers_list_that_does_not_fit_is_a_training_error(tmp_path):
  values = random_original_weights(tiny_config(num_hidden_layers=4), np.random.default_rng(0))
  path = checkpoints.write_tf1_checkpoint(values, str(tmp_path / "model.ckpt"))
  model = classifier_head.build_classifier_model(tiny_config(num_hidden_layers=2), 3)
  with pytest.raises(TrainingError, match="--init_layers=0,1,2: the model has 2 layers and the "
                     "checkpoint 4"):
    loop.load_init_checkpoint(model, path, "0,1,2")
