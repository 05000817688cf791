// Prints which crypto port `#crypto` resolved to under the conditions this process runs with.
import { runtime } from '#crypto'
process.stdout.write(runtime)
