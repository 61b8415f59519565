"""The speedup plots' linear line is y = x at every device count; at most five series a panel."""

from types import SimpleNamespace

from scalelab.report.figures._style import plt
from scalelab.report.figures.plan import MAX_SERIES, linear_line, plan_figure, scaling_figure


def _plan(name: str, archs=("ps", "allreduce", "hierarchical"), counts=(1, 2, 4, 8, 16, 32)):
    sweep = [{"gpus": g, "architecture": a, "speedup": g * 0.9, "efficiency": 0.9}
             for a in archs for g in counts]
    return {"inputs": {"cluster_name": name, "options": {"target_efficiency": 0.8}},
            "sweep": sweep}


def _linear(ax):
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "linear"]
    return list(line.get_xdata()), list(line.get_ydata())


def test_the_linear_line_is_y_equals_x_at_every_device_count():
    assert linear_line([32, 1, 4, 2, 16, 8, 4]) == ([1, 2, 4, 8, 16, 32], [1, 2, 4, 8, 16, 32])
    fig = scaling_figure([_plan("a100")], [], [])
    xs, ys = _linear(fig.axes[0])
    assert xs == [1, 2, 4, 8, 16, 32] and ys == xs  # on a log2 axis, at 8 devices it reads 8
    assert fig.axes[0].get_xscale() == "log"
    plt.close(fig)


def test_more_than_five_series_go_to_one_row_of_panels_per_network():
    plans = [_plan("a"), _plan("b"), _plan("c", counts=(1, 2, 4, 8))]
    fig = scaling_figure(plans, [], [])
    speed = fig.axes[0::2]
    assert len(speed) == 3
    for ax in speed:
        data = [ln for ln in ax.get_lines() if ln.get_label() != "linear"]
        assert len(data) <= MAX_SERIES
    xs, ys = _linear(speed[2])
    assert xs == ys == [1, 2, 4, 8]
    plt.close(fig)


def test_plan_plot_small_multiples_and_linear_line():
    rows = [SimpleNamespace(gpus=g, architecture=a, speedup=g * 0.8, efficiency=0.8)
            for a in ("ps", "allreduce", "hierarchical") for g in (1, 2, 4, 8)]
    fig = plan_figure({"10GbE": rows, "100GbE": rows}, ["ps", "allreduce", "hierarchical"], 8,
                      0.8, "t")
    speed = fig.axes[0::2]
    assert len(speed) == 2
    for ax in speed:
        assert _linear(ax) == ([1, 2, 4, 8], [1, 2, 4, 8])
        assert len([ln for ln in ax.get_lines() if ln.get_label() != "linear"]) <= MAX_SERIES
    plt.close(fig)
