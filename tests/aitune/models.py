"""The small models and plain objects holding modules that more than one of the ported AITune tests use."""

import torch
from torch import nn


class Nested(nn.Module):
    """relu(linear(x)): a module whose children are wrapped or inspected on their own."""

    def __init__(self, in_features: int = 10):
        super().__init__()
        self.linear = nn.Linear(in_features, 10)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.linear(x))


class ObjectWithoutModules:
    """A callable object that holds a tensor and no module."""

    def __init__(self):
        self.data = torch.randn(10, 10)

    def __call__(self, x):
        return x + self.data


class ObjectWithAttributes:
    """A callable object holding one module beside a tensor, a list and a dict."""

    def __init__(self):
        self.model = nn.Linear(10, 20)
        self.data = torch.randn(5, 5)
        self.list_data = [1, 2, 3]
        self.dict_data = {"key": "value"}

    def __call__(self, x):
        return self.model(x)
