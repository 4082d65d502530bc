"""``python -m partitioner``: the command line (:func:`partitioner.cli.main`)."""
import sys

try:
    from .cli.exits import exit_interrupted, interrupts_are_never_ignored

    interrupts_are_never_ignored()
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while the (light) entry point itself loads: as main would answer it
    try:
        exit_interrupted()
    except NameError:  # the interrupt landed before cli.exits loaded
        sys.stderr.write("interrupted\n")
        sys.exit(130)

main()
