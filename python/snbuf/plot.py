"""Matplotlib pictures of a link, as `snbuf show` draws them (needs matplotlib; the rest of the
package does not). Times are seconds from the trigger on the detector's clock.

    import snbuf, snbuf.plot
    link = snbuf.open(path).link(0)
    snbuf.plot.heat_map(link, -0.01, 0.01)
    snbuf.plot.waveform(link, channel=17)
"""

import numpy as np


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("snbuf.plot needs matplotlib (pip install matplotlib, or apt-get install "
                          "python3-matplotlib)") from e
    return plt


def heat_map(link, start_s=None, stop_s=None, ax=None):
    """Channel x time, ADC minus each channel's median, on a diverging map centred at 0."""
    plt = _pyplot()
    t, adc = link.adc(start_s, stop_s)
    signal = adc.astype(np.float64) - np.median(adc, axis=0)
    scale = max(np.abs(signal).max(initial=0.0), 1.0)
    ax = ax or plt.gca()
    im = ax.imshow(signal.T, aspect="auto", origin="lower", cmap="RdBu_r", vmin=-scale, vmax=scale,
                   extent=(t[0], t[-1], 0, adc.shape[1]) if len(t) else None, interpolation="nearest")
    ax.set_xlabel("time from the trigger (s)")
    ax.set_ylabel("channel")
    plt.colorbar(im, ax=ax, label="ADC - baseline")
    return ax


def waveform(link, channel, start_s=None, stop_s=None, ax=None):
    """One channel's ADC minus its median, every sample at its own time."""
    plt = _pyplot()
    t, adc = link.adc(start_s, stop_s)
    v = adc[:, channel].astype(np.float64)
    ax = ax or plt.gca()
    ax.plot(t, v - np.median(v), lw=0.8)
    ax.set_xlabel("time from the trigger (s)")
    ax.set_ylabel(f"channel {channel}: ADC - baseline")
    return ax
