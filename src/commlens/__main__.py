from commlens.cli import main

main()
