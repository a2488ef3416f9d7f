package codegen

// Header is the first line of every file the extension generates.
const Header = header
