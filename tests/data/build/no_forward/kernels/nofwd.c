/* Test candidate that forgets the ABI entry point (a C unit with a helper only). */
int helper(int x)
{
	return 2 * x;
}
