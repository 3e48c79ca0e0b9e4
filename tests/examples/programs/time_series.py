"""A time-series predictor in the style of PyTorch's examples/time_sequence_prediction,
as a plain PyTorch program: two stacked LSTMCells stepped by hand over sine waves,
predicting `future` steps beyond the input, trained with MSE (here with Adam)."""
import torch
import torch.nn as nn


class Sequence(nn.Module):
    def __init__(self, hidden=51):
        super().__init__()
        self.hidden = hidden
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)

    def forward(self, input, future=0):
        outputs = []
        h_t = torch.zeros(input.size(0), self.hidden, dtype=input.dtype)
        c_t = torch.zeros(input.size(0), self.hidden, dtype=input.dtype)
        h_t2 = torch.zeros(input.size(0), self.hidden, dtype=input.dtype)
        c_t2 = torch.zeros(input.size(0), self.hidden, dtype=input.dtype)
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for i in range(future):  # if we should predict the future
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        return torch.cat(outputs, dim=1)


def train(seq, input, target, steps, lr=0.01):
    criterion = nn.MSELoss()
    optimizer = torch.optim.Adam(seq.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        out = seq(input)
        loss = criterion(out, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    with torch.no_grad():
        future = 5
        pred = seq(input[:2], future=future)
    return losses, pred
