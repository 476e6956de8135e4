"""``python -m commlens.bench``: one rank of the benchmark, under any launcher."""

from commlens.bench.worker import main

if __name__ == "__main__":
    main()
