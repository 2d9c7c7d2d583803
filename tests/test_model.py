"""The seed's model, exactly: layer sizes, parameter count, ReLU placement."""

import torch

from ddp_tutorial.model import DeepNeuralNetwork, count_parameters


def test_parameter_count_of_the_seed_model():
    model = DeepNeuralNetwork(4, 28 * 28, 128, 10)
    # 784·128+128 + 2·(128·128+128) + 128·10+10
    assert count_parameters(model) == 134_794
    assert [tuple(layer.weight.shape) for layer in model.hidden_layers] == [
        (128, 784), (128, 128), (128, 128), (10, 128)]
    assert isinstance(model.hidden_layers, torch.nn.ModuleList)


def test_relu_between_layers_but_not_after_the_last():
    torch.manual_seed(0)
    model = DeepNeuralNetwork(3, 5, 7, 4)
    x = torch.randn(6, 5)
    layers = model.hidden_layers
    expected = layers[2](torch.relu(layers[1](torch.relu(layers[0](x)))))
    out = model(x)
    assert torch.equal(out, expected)
    assert (out < 0).any(), "the last layer's output must not pass through a ReLU"


def test_two_layers_is_the_smallest_model():
    assert len(DeepNeuralNetwork(2, 4, 3, 2).hidden_layers) == 2
