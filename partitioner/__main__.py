"""``python -m partitioner``: the command line (:func:`partitioner.cli.main`)."""
import sys

try:
    from .cli.exits import interrupts_are_never_ignored

    interrupts_are_never_ignored()
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while the (light) entry point itself loads: as main would answer it
    sys.stderr.write("interrupted\n")
    sys.exit(130)

main()
