import matplotlib

# Library tests draw off screen. (Not through MPLBACKEND: nbval's kernels would inherit it.)
matplotlib.use("Agg")
