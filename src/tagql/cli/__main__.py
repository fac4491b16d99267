from tagql.cli import main

main()
