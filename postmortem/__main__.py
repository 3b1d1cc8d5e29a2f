from postmortem.cli import main

main()
