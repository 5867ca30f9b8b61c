from envctl.cli import main

main()
