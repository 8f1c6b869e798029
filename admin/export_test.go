package admin

// CommandCount is the number of admin commands, the rows of SHOW HELP.
func CommandCount() int { return len(specs) }
