from packtool.cli.app import main

main()
