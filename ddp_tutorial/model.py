"""Step 6 of the story — the model: the seed tutorial's deep neural network (a plain MLP).

``DeepNeuralNetwork(4, 28*28, 128, 10)`` is 784 → 128 → 128 → 128 → 10: four
``Linear`` layers in a ``ModuleList`` with a ReLU after every layer but the last
(the last one gives the class scores, "logits", which ``CrossEntropyLoss``
expects). It has 134 794 trainable parameters.

Nothing here knows about distribution: DDP wraps an ordinary model.
"""

from __future__ import annotations

import torch


class DeepNeuralNetwork(torch.nn.Module):
    """``num_layers`` Linear layers: input → hidden × (num_layers − 1) → classes."""

    def __init__(self, num_layers: int, input_features: int, num_hidden_features: int, num_classes: int):
        super().__init__()
        if num_layers < 2:
            raise ValueError("num_layers must be at least 2 (an input and an output layer)")
        self.hidden_layers = torch.nn.ModuleList()
        self.hidden_layers.append(torch.nn.Linear(input_features, num_hidden_features))
        for _ in range(num_layers - 2):
            self.hidden_layers.append(torch.nn.Linear(num_hidden_features, num_hidden_features))
        self.hidden_layers.append(torch.nn.Linear(num_hidden_features, num_classes))
        self.relu_activation = torch.nn.ReLU()

    def forward(self, samples: torch.Tensor) -> torch.Tensor:
        out = samples
        for layer in self.hidden_layers[:-1]:
            out = self.relu_activation(layer(out))
        return self.hidden_layers[-1](out)


def count_parameters(model: torch.nn.Module) -> int:
    """The number of trainable parameters (134 794 for the seed's 784-128-128-128-10)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
